#!/usr/bin/env bash
# load: how fast the pinned trunk comes in, against the disk. fio reads the slice's largest shard
# (7 GiB, O_DIRECT, 16 MiB blocks, 8 in flight, sequential; before and after the runs) for the
# disk's rate; then the previous
# binary and this one load the k3-slice at --ram-budget (8 GiB: 6.8 GB of trunk pinned) and run a
# 4-token prompt, each run cold (page cache dropped) in a memory cgroup of the budget, --runs
# times alternately. Reports load seconds, bytes read at load, their rate against fio's, and the
# system CPU of the load (page faults). Writes docs/PERFORMANCE.md section "Load: the pinned
# trunk against the disk" and prints it.
#
# usage: tests/bench/load.sh --old BINARY [--bin BINARY] [--model DIR] [--budget 8G] [--runs 3] [--doc FILE]
# Needs root (cgroups, drop_caches) and fio (installed if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budget=8G runs=3 bin= old= doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--budget SIZE] [--runs N] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "load: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "load: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_need_fio
bench_bin_out
bench_slice "$bin" "$model"

shard=$(ls -S "$model"/*.safetensors | head -n 1)
# The disk's rate for a read as long as the load's (this machine's disk varies: measured before
# and after the runs).
disk() {
  drop
  fio --name=load --filename="$shard" --readonly --direct=1 --rw=read --bs=16M --iodepth=8 --ioengine=libaio \
      --size=7G --output-format=json > "$out/fio-$1.json" 2>/dev/null
}
disk before
uptime > "$out/uptime.txt"
for i in $(seq "$runs"); do
  for which in old new; do
    exe=$bin
    [ $which = old ] && exe=$old
    drop
    bash tests/cgroup-run.sh "$(to_bytes "$budget")" "$out/cgroup-$which-$i.txt" "$exe" run --model "$model" \
      --ids 5,6,7,8 -n 2 --json --quiet --ram-budget "$budget" --trunk-pack none > "$out/run-$which-$i.json" 2> "$out/err-$which-$i.txt" \
      || { echo "load: $which run $i failed" >&2; tail -3 "$out/err-$which-$i.txt" >&2; }
  done
done
disk after

python3 - "$out" "$model" "$budget" "$runs" "$doc" <<'PY'
import json, os, subprocess, sys, datetime, statistics
out, model, budget, runs, path = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
def rate(w):
    f = json.load(open(f"{out}/fio-{w}.json"))["jobs"][0]["read"]
    return f["io_bytes"] / (f["runtime"] / 1000.0)
fb, fa = rate("before"), rate("after")
fio = (fb + fa) / 2
up = open(f"{out}/uptime.txt").read().split("load average:")[-1].strip()
L = ["## Load: the pinned trunk against the disk\n",
     f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores; model: `{os.path.basename(model.rstrip('/'))}` "
     f"(the k3-slice), `--ram-budget {budget} --trunk-pack none`, a 4-token prompt and 2 tokens; every run cold (page "
     f"cache dropped) in a memory cgroup of {budget}, the two binaries alternately. The disk: fio, sequential O_DIRECT "
     f"reads of 7 GiB of the largest shard in 16 MiB blocks, 8 in flight: {fb/1e9:.2f} GB/s before the runs, {fa/1e9:.2f} "
     f"after, **{fio/1e9:.2f} GB/s** their mean (*of fio*). *load s* is the whole load "
     f"(open, plan, tokenizer, the pinned trunk); *rate* is the bytes read at load over it. Load average before: {up}.\n",
     "Command: `sudo bash tests/bench/load.sh --old OLD_BINARY`\n",
     "| binary | run | load s | read at load GB | rate GB/s | of fio | CPU sys s (load) |",
     "|---|---|---|---|---|---|---|"]
best = {}
for which in ("old", "new"):
    for i in range(1, runs + 1):
        try:
            s = json.load(open(f"{out}/run-{which}-{i}.json"))["stats"]
        except Exception:
            L.append(f"| {which} | {i} | failed | | | | |")
            continue
        rate = s["bytes_read_at_load"] / s["load_seconds"]
        best.setdefault(which, []).append(rate)
        L.append(f"| {which} | {i} | {s['load_seconds']:.2f} | {s['bytes_read_at_load']/1e9:.2f} | {rate/1e9:.2f} | "
                 f"{rate/fio:.0%} | {s['cpu_sys_seconds_load']:.1f} |")
L.append("")
for which, v in best.items():
    L.append(f"- {which}: median {statistics.median(v)/1e9:.2f} GB/s = {statistics.median(v)/fio:.0%} of fio.")
text = "\n".join(L) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## Load: the pinned trunk against the disk", text)
PY
