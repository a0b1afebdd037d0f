#!/usr/bin/env bash
# prefill-project: long prompts on the full-size layouts (the whole 93-layer Kimi K3 and
# gpt-oss-120b, sparse: every weight a zero hole, so reads cost no device I/O). For each model,
# one measured run inside a memory cgroup equal to --budget (a prompt of --measure tokens, which
# the plan takes in one span: the cgroup's peak, and this machine's compute per prompt token from
# the run's user CPU over its threads), then the plan at 1k, 4k and 16k tokens (`run
# --plan-only`): the bytes the prompt reads as planned (spans) and in chunks (the previous
# binaries' prefill), and from these the projected prefill time at 3 and 5 GB/s. Writes
# docs/PERFORMANCE.md section "Long prompts: full-size models, projected" and prints it.
#
# usage: tests/bench/prefill-project.sh [--bin BINARY] [--k3 DIR] [--goss DIR] [--budget 8G]
#          [--lengths "1024 4096 16384"] [--measure "k3:128 goss:4096"] [--rates "3 5"] [--doc FILE]
#   --measure LIST        the measured prompt's length for each model (the full K3 computes about
#                         4 s a token on 2 cores, so 4,096 tokens would take hours there)
#   --k3 DIR, --goss DIR  the sparse checkpoints (default $MS_BENCH_DIR/k3-full and
#                         $MS_BENCH_DIR/gpt-oss-120b; written if absent, a few hundred MB of disk)
# Needs root (cgroups, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bench=${MS_BENCH_DIR:-$root/build-bench}
k3=$bench/k3-full goss=$bench/gpt-oss-120b
budget=8G lengths="1024 4096 16384" measure="k3:128 goss:4096" rates="3 5" bin= doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --k3) k3=$2; shift 2 ;;
    --goss) goss=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    --measure) measure=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--k3 DIR] [--goss DIR] [--budget SIZE] [--lengths LIST] [--measure N] [--rates LIST] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "prefill-project: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
[ -f "$k3/config.json" ] || "$bin" synth --preset k3-full --sparse --out "$k3"
[ -f "$goss/config.json" ] || "$bin" synth --preset gpt-oss-120b --sparse --out "$goss"

ids() { python3 -c "
import random
r = random.Random($1)
print(','.join(str(r.randrange(1, $2)) for _ in range($1)))"; }

for m in k3 goss; do
  dir=${!m}
  mn=$(tr ' ' '\n' <<< "$measure" | sed -n "s/^$m://p")
  vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$dir/config.json")
  for n in $mn $lengths; do
    [ -f "$out/ids-$m-$n.txt" ] || ids "$n" "$vocab" > "$out/ids-$m-$n.txt"
  done
  for n in $lengths; do
    "$bin" run --model "$dir" --ids-file "$out/ids-$m-$n.txt" --ram-budget "$budget" --trunk-pack none \
      --plan-only --json > "$out/plan-$m-$n.json" 2> "$out/plan-$m-$n.err"
  done
  drop
  set +e
  bash tests/cgroup-run.sh "$(to_bytes "$budget")" "$out/cgroup-$m.txt" "$bin" run --model "$dir" \
    --ids-file "$out/ids-$m-$mn.txt" -n 1 --json --quiet --ram-budget "$budget" --trunk-pack none \
    > "$out/run-$m.json" 2> "$out/run-$m.err"
  rc=$?
  set -e
  [ $rc -eq 0 ] || { echo "prefill-project: $m, $mn tokens failed with status $rc" >&2; tail -3 "$out/run-$m.err" >&2; }
  echo "prefill-project: $m measured" >&2
done

python3 - "$out" "$k3" "$goss" "$budget" "$lengths" "$measure" "$rates" "$doc" <<'PY'
import json, os, subprocess, sys, datetime
out, k3, goss, budget, lengths, measure, rates, path = sys.argv[1:9]
lengths = [int(x) for x in lengths.split()]
rates = [float(x) for x in rates.split()]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
def size(d): return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
def hm(s): return f"{s/3600:.1f} h" if s >= 3600 else f"{s/60:.0f} min"
lines = ["## Long prompts: full-size models, projected\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores: `moestream synth --preset k3-full --sparse` "
         f"and `--preset gpt-oss-120b --sparse` (the released layouts, every weight a zero hole: reading costs no device "
         f"I/O, computing costs what real weights do), `--trunk-pack none`, `--ram-budget {budget}`. *measured*: a "
         f"prompt ({measure}) run inside a memory cgroup of {budget}, page cache dropped first: its peak, "
         f"and the compute per prompt token (user CPU of the prefill over its threads, at this short context; attention "
         f"over longer ones costs more, so the projection's compute is a lower bound). *read*: the bytes the plan "
         f"(`run --plan-only`, `prompt_read_bytes`) estimates the prompt reads, as planned now (spans) and in chunks "
         f"(`prompt_read_bytes_in_chunks`: the previous binaries' prefill in 64-token passes); the estimate's inputs and "
         f"its check against the measured k3-slice are in *Long prompts*. *time* = the read at that rate plus the "
         f"compute: measured passes overlap them little (a MoE layer's reads start after its router; see *Serve: a "
         f"long prompt among decoding requests*).\n",
         "Command: `sudo bash tests/bench/prefill-project.sh`\n"]
rows = []
for m, d in (("k3", k3), ("goss", goss)):
    name = "Kimi K3 (full)" if m == "k3" else "gpt-oss-120b"
    try:
        j = json.load(open(f"{out}/run-{m}.json")); s = j["stats"]
        cg = dict(x.split("=") for x in open(f"{out}/cgroup-{m}.txt").read().split())
        per = s["cpu_user_seconds_prefill"] / s["threads"] / s["prompt_tokens"]
        meas = (f"{name}: {size(d)/1e12:.2f} TB; {s['prompt_tokens']} tokens measured: {s['prefill_seconds']:.0f} s, "
                f"compute {per:.3f} s a token, cgroup peak {int(cg.get('peak', 0))/2**30:.2f} GiB, "
                f"OOM kills {cg.get('oom_kills', '?')}, plan span {s['plan']['prefill_span']}")
    except Exception as e:
        per, meas = None, f"{name}: the measured run failed ({e})"
    lines.append(f"- {meas}")
    for n in lengths:
        p = json.load(open(f"{out}/plan-{m}-{n}.json"))["plan"]
        rows.append((name, n, p, per, size(d)))
lines += ["", "| model | prompt | plan | read now TB | = checkpoint x | read in chunks TB | "
          + " | ".join(f"time at {r:g} GB/s: now / chunks" for r in rates) + " |",
          "|---|---|---|---|---|---|" + "---|" * len(rates)]
for name, n, p, per, sz in rows:
    span = p["prefill_span"]
    plan = (f"spans of {span}" + (" lending the pins" if p["span_lends_pinned_trunk"] else "")) if span > p["prefill_chunk"] else f"chunks of {p['prefill_chunk']}"
    now, old = p["prompt_read_bytes"], p["prompt_read_bytes_in_chunks"]
    comp = per * n if per is not None else 0
    t = []
    for r in rates:
        a, b = now / (r * 1e9) + comp, old / (r * 1e9) + comp
        t.append(f"{hm(a)} / {hm(b)}")
    lines.append(f"| {name} | {n} | {plan} | {now/1e12:.2f} | {now/sz:.2f} | {old/1e12:.1f} | " + " | ".join(t) + " |")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## Long prompts: full-size models, projected", text)
PY
