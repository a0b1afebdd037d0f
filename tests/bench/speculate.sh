#!/usr/bin/env bash
# Speculative decoding: decode speed, tokens per pass and bytes read per token of a real-width
# Kimi K3 slice at RAM budgets of 1 and 8 GiB, with --speculate off and N = 2, 4, 8 verifying
# drafts that are all right (a previous run's generated_ids as --draft-file: the upper bound),
# all wrong (every id + 1: the overhead, also under auto) and from n-gram lookup on a repetitive
# prompt. Every run's logits are compared bit for bit with off's. Each run: page cache dropped,
# then run inside a memory cgroup equal to its budget. Writes docs/PERFORMANCE.md (section
# "Speculative decoding") and prints it.
#
# usage: tests/bench/speculate.sh [--model DIR] [--budgets "1G 8G"] [-n N] [--ns "2 4 8"]
#                                 [--no-build] [--no-doc] [--bin PATH]
# Needs root (cgroups, drop_caches) and the slice (MS_BENCH_DIR/k3-slice-3, written once with
# `moestream synth --preset k3-slice --layers 3`). --no-build uses build/moestream as it is;
# --no-doc only prints (e.g. when validating on a small synth model); --bin runs that moestream
# binary instead of build/moestream (implies --no-build).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G 8G"
ntok=16
ns="2 4 8"
build=1
doc=1
bin=
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --ns) ns=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --no-doc) doc=0; shift ;;
    --bin) bin=$2; build=0; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [-n N] [--ns LIST] [--no-build] [--no-doc] [--bin PATH]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "speculate: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
[ $build -eq 0 ] || bench_build
[ -n "$bin" ] || bin=$root/build/moestream
bench_slice "$bin" "$model"
out=$(mktemp -d)
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('vocab_size') or c['text_config']['vocab_size'])" "$model/config.json")
# (ids taken modulo the vocabulary, so that a small model for validation takes the same prompts)
modv() { python3 -c "import sys; print(','.join(str(int(x) % int(sys.argv[2])) for x in sys.argv[1].split(',')))" "$1" "$vocab"; }
ids=$(modv "100,2000,30000,4000,500,60000,7000,80")
rep=$(modv "100,2000,30000,4000,100,2000,30000,4000,100,2000,30000,4000,100,2000,30000")
uptime > "$out/uptime-before"

# run NAME BUDGET PROMPT [options...]: one measured run; its JSON in $out/NAME.json.
run() {
  local name=$1 b=$2 prompt=$3
  shift 3
  drop
  local args=(run --model "$model" --ids "$prompt" -n "$ntok" --temperature 0 --json --quiet
              --dump-logits "$out/$name.logits" "$@")
  set +e
  if [ "$b" = unlimited ]; then
    "$bin" "${args[@]}" > "$out/$name.json"
  else
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/$name.cg" "$bin" "${args[@]}" --ram-budget "$b" > "$out/$name.json"
  fi
  local rc=$?
  set -e
  [ $rc -eq 0 ] || echo "speculate: run $name failed with status $rc" >&2
  echo "speculate: $name done" >&2
}

for b in $budgets; do
  run "$b-off" "$b" "$ids" --speculate off
  python3 - "$out/$b-off.json" "$out/$b-right.txt" "$out/$b-wrong.txt" "$vocab" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["generated_ids"]
open(sys.argv[2], "w").write(",".join(map(str, g)) + "\n")
open(sys.argv[3], "w").write(",".join(str((x + 1) % int(sys.argv[4])) for x in g) + "\n")
PY
  for n in $ns auto; do run "$b-right-$n" "$b" "$ids" --speculate "$n" --draft-file "$out/$b-right.txt"; done
  for n in $ns auto; do run "$b-wrong-$n" "$b" "$ids" --speculate "$n" --draft-file "$out/$b-wrong.txt"; done
  run "$b-repoff" "$b" "$rep" --speculate off
  for n in $ns auto; do run "$b-ngram-$n" "$b" "$rep" --speculate "$n"; done
done
uptime > "$out/uptime-after"

python3 - "$out" "$model" "$ntok" "$budgets" "$ns" "$doc" <<'PY'
import json, os, subprocess, sys, datetime
out, model, ntok, budgets, ns, doc = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5].split(), sys.argv[6] == "1"
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def load(name):
    try: return json.load(open(f"{out}/{name}.json"))
    except Exception: return None
def same(a, b):
    try: return open(f"{out}/{a}.logits", "rb").read() == open(f"{out}/{b}.logits", "rb").read()
    except Exception: return False
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
up = [open(f"{out}/uptime-{w}").read().strip() for w in ("before", "after")]
title = "## Speculative decoding" if ntok == 16 else f"## Speculative decoding, {ntok} tokens"
L = [title + "\n"]
L.append(f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores; model `{os.path.basename(model)}` "
         f"({size/1e9:.1f} GB). Prompt of 8 tokens (n-gram rows: a 15-token repetitive prompt), {ntok} tokens "
         f"generated greedily. Each run: page cache dropped, then run inside a memory cgroup equal to `--ram-budget`. "
         f"Load (`uptime`) before: `{up[0]}`; after: `{up[1]}` (the machine is shared: re-run on an idle one for "
         f"final figures).\n")
L.append("Command: `sudo bash tests/bench/speculate.sh --budgets \"" + " ".join(budgets) + "\"" +
         (f" -n {ntok}" if ntok != 16 else "") + (" --ns \"" + " ".join(ns) + "\"" if ns != ["2", "4", "8"] else "") +
         "` (the model: " + os.path.basename(model) +
         ("; its trunk pack beside it, read where the trunk streams" if os.path.exists(model.rstrip("/") + ".trunk-pack/trunk.pack")
          else "; no trunk pack beside it") + ")\n")
L.append("| budget | drafts | --speculate | decode s/token | tokens/s vs off | tokens per pass | drafted / accepted | GB read / token | logits = off |")
L.append("|---|---|---|---|---|---|---|---|---|")
for b in budgets:
    base = load(f"{b}-off"); rbase = load(f"{b}-repoff")
    rows = [("none", "off", f"{b}-off", f"{b}-off", base)]
    rows += [("all right", n, f"{b}-right-{n}", f"{b}-off", base) for n in ns + ["auto"]]
    rows += [("all wrong", n, f"{b}-wrong-{n}", f"{b}-off", base) for n in ns + ["auto"]]
    rows += [("n-gram", "off", f"{b}-repoff", f"{b}-repoff", rbase)]
    rows += [("n-gram", n, f"{b}-ngram-{n}", f"{b}-repoff", rbase) for n in ns + ["auto"]]
    for kind, n, name, ref, refj in rows:
        r = load(name)
        if r is None:
            L.append(f"| {b} | {kind} | {n} | failed | | | | | |"); continue
        s = r["stats"]
        spt = s["decode_seconds_per_token"]
        rspt = refj["stats"]["decode_seconds_per_token"] if refj else 0
        speed = f"{rspt/spt:.2f}x" if spt > 0 and rspt > 0 else ""
        L.append(f"| {b} | {kind} | {n} | {spt:.3f} | {speed} | {s.get('tokens_per_decode_pass', 1.0):.2f} | "
                 f"{s.get('draft_tokens', 0)} / {s.get('accepted_draft_tokens', 0)} | "
                 f"{s['decode_bytes_read_per_token']/1e9:.3f} | {'yes' if same(name, ref) else 'NO'} |")
L.append("")
L.append("Columns: *decode s/token* excludes the prefill; *tokens/s vs off* is off's s/token over this run's "
         "(same prompt); *tokens per pass* is generated tokens per decoding pass (accepted drafts + 1); *GB read / "
         "token* is what decoding read from disk (experts + streamed trunk) per generated token; *logits = off* "
         "compares the `--dump-logits` files bit for bit. All-right drafts are off's `generated_ids`; all-wrong ones "
         "are those ids + 1.\n")
# auto against the better of off and the best fixed N (tokens/s; bytes per token beside it)
for b in budgets:
    for kind, pre, ref in (("all right", "right", "off"), ("all wrong", "wrong", "off"), ("n-gram", "ngram", "repoff")):
        base, au = load(f"{b}-{ref}"), load(f"{b}-{pre}-auto")
        fixed = [(n, load(f"{b}-{pre}-{n}")) for n in ns]
        if not base or not au or any(r is None for _, r in fixed): continue
        tps = lambda r: 1 / r["stats"]["decode_seconds_per_token"]
        bn, br = max(fixed, key=lambda x: tps(x[1]))
        best, who = (tps(br), f"N = {bn}") if tps(br) > tps(base) else (tps(base), "off")
        gb = lambda r: r["stats"]["decode_bytes_read_per_token"] / 1e9
        bestr = br if who != "off" else base
        ratio = tps(au) / best
        none = au["stats"].get("draft_tokens", 0) == 0 and all(r["stats"].get("draft_tokens", 0) == 0 for _, r in fixed)
        if none:  # no drafts anywhere: every run did off's passes; times differ only by the machine's spread
            L.append(f"- {b}, {kind}: no run drafted anything (the drafter found no match), so `auto` did off's work: "
                     f"bytes per token {gb(au):.3f} against {gb(base):.3f} GB; its time, {tps(au) / tps(base):.2f}x off's, "
                     f"is the spread between runs of the same work.")
            continue
        # its work against the better's: bytes per token and decoding passes (a pass streams the
        # trunk at small budgets); where the disk's speed wanders, the work is what can be compared
        passes = lambda r: r["stats"].get("decode_passes", 0) or 1
        work = max(gb(au) / gb(bestr), passes(au) / passes(bestr))
        verdict = ("within 5% by time" if ratio >= 0.95 else "within 5% by work (the time is within the spread)"
                   if work <= 1.05 else "NOT within 5%")
        L.append(f"- {b}, {kind}: `auto` {ratio:.2f}x the tokens/s of the better ({who}); its work: bytes per token "
                 f"{gb(au):.3f} against {gb(bestr):.3f} GB, {passes(au)} decoding passes against {passes(bestr)}: "
                 f"**{verdict}**.")
L.append("")
text = "\n".join(L) + "\n"
print(text)
if doc:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section("docs/PERFORMANCE.md", title, text)
PY
rm -rf "$out"
