#!/usr/bin/env bash
# in-ram: a model that fits in RAM, run with no budget (the plan takes MemAvailable), the
# previous binary beside this one, in both I/O modes (O_DIRECT, the default, and
# --buffered-io), page cache dropped before each run: bytes read from disk against the model's
# size, the expert cache's evictions, misses and peak against its plan, prefill and decode
# speed, and the generated tokens compared. Default model: the real-width gpt-oss-20b
# (`synth --preset gpt-oss-20b`, 13 GiB). Writes docs/PERFORMANCE.md section "In RAM: every
# weight read once" and prints it.
#
# usage: tests/bench/in-ram.sh --old BINARY [--bin BINARY] [--model DIR] [--lengths "64 512"]
#          [-n 32] [--doc FILE]
# Needs root (drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/gpt-oss-20b
lengths="64 512" n=32 bin= old= doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--lengths LIST] [-n N] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "in-ram: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "in-ram: needs root (drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
[ -f "$model/config.json" ] || { mkdir -p "$(dirname "$model")"; "$bin" synth --preset gpt-oss-20b --out "$model"; }
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")

for len in $lengths; do
  python3 -c "
import random
r = random.Random($len)
print(','.join(str(r.randrange(1, $vocab)) for _ in range($len)))" > "$out/ids-$len.txt"
  for io in direct buffered; do
    flag=
    [ $io = buffered ] && flag=--buffered-io
    for which in old new; do # alternating, so drift on a shared machine hits both alike
      exe=$bin
      [ $which = old ] && exe=$old
      r=$which-$len-$io
      drop
      uptime > "$out/uptime-$r.txt"
      set +e
      "$exe" run --model "$model" --ids-file "$out/ids-$len.txt" -n "$n" --temperature 0 --json --quiet $flag \
        > "$out/run-$r.json" 2> "$out/err-$r.txt"
      rc=$?
      set -e
      [ $rc -eq 0 ] || { echo "in-ram: $r failed with status $rc" >&2; tail -3 "$out/err-$r.txt" >&2; }
      echo "in-ram: $r done" >&2
    done
  done
done

python3 - "$out" "$model" "$lengths" "$n" "$doc" <<'PY'
import json, os, subprocess, sys, datetime
out, model, lengths, n, path = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/^Mem:/ {print $2}'")
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
lines = ["## In RAM: every weight read once\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB of RAM; model: "
         f"`{os.path.basename(model.rstrip('/'))}` ({size/1e9:.1f} GB), no `--ram-budget` (the plan takes what "
         f"the machine has available), prompts of random ids, {n} tokens generated greedily, page cache dropped "
         f"before each run, the two binaries alternating. *old* is the previous binary (its expert cache's "
         f"capacity followed a paced background grower, evicting while it lagged), *new* this one (the cache "
         f"holds its plan from the first step; a step the grower has not kept up with faults in the buffer it "
         f"needs itself). *read* is every byte read from the checkpoint in the run (load included).\n",
         "Command: `sudo bash tests/bench/in-ram.sh --old OLD_BINARY`\n",
         "| prompt | I/O | binary | read GB | = model x | evictions | misses | cache peak / planned GiB | buffers made in steps | prefill tok/s | decode tok/s | load avg | tokens = old |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for ln in lengths:
    for io in ("direct", "buffered"):
        for which in ("old", "new"):
            r = f"{which}-{ln}-{io}"
            up = open(f"{out}/uptime-{r}.txt").read().split("load average:")[-1].split(",")[0].strip()
            try:
                j = json.load(open(f"{out}/run-{r}.json"))
            except Exception:
                lines.append(f"| {ln} | {io} | {which} | failed | | | | | | | | {up} | |")
                continue
            s = j["stats"]
            rd = s["bytes_read_at_load"] + s["bytes_read_experts"] + s["bytes_read_trunk"]
            try:
                same = "yes" if json.load(open(f"{out}/run-old-{ln}-{io}.json"))["generated_ids"] == j["generated_ids"] else "NO"
            except Exception:
                same = "?"
            made = s.get("expert_cache_buffers_made_in_steps", "-")
            lines.append(f"| {ln} | {io} | {which} | {rd/1e9:.1f} | {rd/size:.2f} | {s['expert_cache_evictions']} | "
                         f"{s['expert_cache_misses']} | {s['expert_cache_peak_bytes']/2**30:.2f} / "
                         f"{s['expert_cache_capacity_bytes']/2**30:.2f} | {made} | {s['prefill_tokens_per_second']:.1f} | "
                         f"{s['decode_tokens_per_second']:.2f} | {up} | {same} |")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## In RAM: every weight read once", text)
PY
