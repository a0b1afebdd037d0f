#!/usr/bin/env bash
# prefill: long prompts on the real-width k3-slice, the previous binary (chunked prefill) beside
# this one (prefill spans), each run cold (page cache dropped) inside a memory cgroup equal to
# its --ram-budget: bytes read from disk against the checkpoint's size, prefill seconds, CPU,
# peak memory, and the generated tokens of both binaries compared. Writes docs/PERFORMANCE.md
# section "Long prompts" and prints it.
#
# usage: tests/bench/prefill.sh --old BINARY [--bin BINARY] [--model DIR] [--lengths "512 4096"]
#          [--budgets "1G 8G"] [--cases "512:1G 4096:8G"] [--doc FILE]
#   --old BINARY   the previous build's moestream (e.g. built from the commit before spans)
#   --bin BINARY   this build's (default: build/moestream, built now)
#   --model DIR    the slice (default $MS_BENCH_DIR/k3-slice-3; written if absent: 41 GB)
#   --cases LIST   prompt:budget pairs to run instead of every length at every budget
#   --section NAME the docs section (default "Long prompts"; e.g. "Long prompts: gpt-oss-20b"
#                  with --model a `synth --preset gpt-oss-20b` directory)
# Needs root (cgroups, drop_caches). Prompts are random ids (seeded: the same every run).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
lengths="512 4096"
budgets="1G 8G"
bin= old= doc=docs/PERFORMANCE.md cases= section="Long prompts"
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --section) section=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--lengths LIST] [--budgets LIST] [--cases LIST] [--doc FILE] [--section NAME]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "prefill: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "prefill: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
bench_slice "$bin" "$model"

if [ -z "$cases" ]; then
  for n in $lengths; do for b in $budgets; do cases="$cases $n:$b"; done; done
fi
for c in $cases; do
  n=${c%%:*} b=${c##*:}
  [ -f "$out/ids-$n.txt" ] || python3 -c "
import random
r = random.Random($n)
print(','.join(str(r.randrange(1, 160000)) for _ in range($n)))" > "$out/ids-$n.txt"
  for which in old new; do
    exe=$bin
    [ $which = old ] && exe=$old
    r=$which-$n-$b
    drop
    uptime > "$out/uptime-$r.txt"
    set +e
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$r.txt" "$exe" run --model "$model" \
      --ids-file "$out/ids-$n.txt" -n 2 --json --quiet --ram-budget "$b" --trunk-pack none \
      > "$out/run-$r.json" 2> "$out/err-$r.txt"
    rc=$?
    set -e
    [ $rc -eq 0 ] || { echo "prefill: $which at $n tokens, $b failed with status $rc" >&2; tail -3 "$out/err-$r.txt" >&2; }
    echo "prefill: $which, $n tokens at $b done (load $(cut -d, -f3- < "$out/uptime-$r.txt" | xargs))" >&2
  done
done

python3 - "$out" "$model" "$cases" "$doc" "$section" <<'PY'
import json, os, subprocess, sys, datetime
out, model, cases, path, section = sys.argv[1], sys.argv[2], [c.split(":") for c in sys.argv[3].split()], sys.argv[4], sys.argv[5]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
cfg = json.load(open(os.path.join(model, "config.json")))
what = "gpt-oss-20b" if cfg.get("model_type") == "gpt_oss" else "k3-slice --layers 3"
lines = [f"## {section}\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores; model: `moestream synth --preset "
         f"{what}` ({size/1e9:.1f} GB), no trunk pack (`--trunk-pack none`). Prompts of random ids, 2 "
         f"tokens generated greedily (*tokens = old* compares them; logits are compared bit for bit by "
         f"`tests/unit/test_prefill.c`, and are not dumped here: `--dump-logits` plans every prompt row's logits "
         f"into the span's memory). Each run: page cache dropped, then run inside a memory cgroup equal to `--ram-budget`. "
         f"*old* is the previous binary (prefill in chunks of at most 64 tokens, each streaming the unpinned trunk and "
         f"reading the experts its rows route to), *new* this one (prefill spans: one pass, layer by layer, over as "
         f"many prompt tokens as the memory the expert cache, and where the plan says so the pinned trunk, lends). "
         f"*prefill read* counts every byte read from the checkpoint after load until the prompt is in (experts + "
         f"streamed trunk; the pinned trunk read at load is the *load* column); *decode step* is what the one decode "
         f"step read, which for *new* includes reading lent pins again. *scratch w / r GB*: a span's scratch file "
         f"(when memory cannot hold the span): what the process wrote (its dirtied pages, less those dropped unwritten: "
         f"`/proc/self/io`) and what it read beyond the checkpoint's bytes; `-` where the binary does not report them.\n",
         "Command: `sudo bash tests/bench/prefill.sh --old OLD_BINARY`\n",
         "| prompt | budget | binary | prefill s | passes | prefill read GB | = checkpoint x | scratch w / r GB | decode step GB | load GB | CPU user s | CPU sys s | cgroup peak GiB | OOM kills | load avg | tokens = old |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for n, b in cases:
        for which in ("old", "new"):
            r = f"{which}-{n}-{b}"
            up = open(f"{out}/uptime-{r}.txt").read().split("load average:")[-1].split(",")[0].strip()
            try:
                j = json.load(open(f"{out}/run-{r}.json"))
            except Exception:
                lines.append(f"| {n} | {b} | {which} | failed | | | | | | | | | | | {up} | |")
                continue
            s = j["stats"]
            cg = dict(x.split("=") for x in open(f"{out}/cgroup-{r}.txt").read().split())
            dec = s["decode_bytes_read_per_token"] * max(s["generated_tokens"] - 1, 0)
            rd = s["bytes_read_experts"] + s["bytes_read_trunk"] - dec
            try:
                same = "yes" if json.load(open(f"{out}/run-old-{n}-{b}.json"))["generated_ids"] == j["generated_ids"] else "NO"
            except Exception:
                same = "?"
            passes = s["forward_passes"] - s.get("decode_passes", 0)
            sw = "-"
            if "process_bytes_written" in s:
                ck = s["bytes_read_experts"] + s["bytes_read_trunk"] + s["bytes_read_at_load"]
                sw = f"{s['process_bytes_written']/1e9:.1f} / {max(s['process_bytes_read'] - ck, 0)/1e9:.1f}"
            lines.append(f"| {n} | {b} | {which} | {s['prefill_seconds']:.1f} | {passes} | {rd/1e9:.1f} | {rd/size:.2f} | {sw} | {dec/1e9:.1f} | "
                         f"{s['bytes_read_at_load']/1e9:.1f} | {s['cpu_user_seconds_prefill']:.1f} | "
                         f"{s['cpu_sys_seconds_prefill']:.1f} | {int(cg.get('peak', 0))/2**30:.2f} | {cg.get('oom_kills', '?')} | "
                         f"{up} | {same} |")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## " + section, text)
PY
