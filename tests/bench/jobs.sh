#!/usr/bin/env bash
# Jobs benchmark: `moestream jobs` on the real-width Kimi K3 slice, 16 jobs of 8-token prompts and
# 16 generated tokens each, at --max-batch 1, 2, 4, 8, 16 and budgets 1 GiB and 8 GiB, each run
# in a memory cgroup equal to its budget with the page cache dropped first: aggregate generated
# tokens/s, bytes read per generated token, peak RSS, and the bound beside it (the bytes read at
# fio's bandwidth, or the compute time, whichever is longer). Every batch size's token ids are
# compared with batch 1's. Writes docs/PERFORMANCE.md (section "Jobs: continuous batching").
#
# usage: tests/bench/jobs.sh [--model DIR] [--budgets "1G 8G"] [--batches "1 2 4 8 16"]
# Needs root (cgroups, drop_caches), ~41 GB of disk for the slice (written once with
# `moestream synth --preset k3-slice`), and fio (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G 8G"
batches="1 2 4 8 16"
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [--batches LIST]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "jobs bench: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_need_fio
bench_build
bin=$root/build/moestream
out=$(mktemp -d)
bench_slice "$bin" "$model"

# 16 jobs: 8-token prompts (ids spread over the vocabulary), 16 tokens, greedy.
python3 - > "$out/in.jsonl" <<'PY'
import json
for j in range(16):
    ids = [(j * 7919 + t * 104729 + 17) % 163000 for t in range(8)]
    print(json.dumps({"custom_id": f"j{j}", "prompt": ids, "max_tokens": 16}))
PY

shard=$(ls -S "$model"/*.safetensors | head -n 1)
fio_run() {
  drop
  fio --name=jobs --filename="$shard" --readonly --direct=1 --rw=randread --bs=16M --iodepth=8 \
      --ioengine=libaio --runtime=20 --time_based --output-format=json > "$out/fio-$1.json" 2>/dev/null
}
fio_run before
cut -d' ' -f1-3 /proc/loadavg > "$out/load-before.txt" # the machine may be shared: say how busy it was
for b in $budgets; do
  for n in $batches; do
    drop
    set +e
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$b-$n.txt" "$bin" jobs --model "$model" \
      --input "$out/in.jsonl" --output "$out/out-$b-$n.jsonl" --max-batch "$n" --ram-budget "$b" \
      --json-progress 2> "$out/progress-$b-$n.txt"
    rc=$?
    set -e
    [ $rc -eq 0 ] || { echo "jobs bench: $b batch $n failed with status $rc" >&2; tail -3 "$out/progress-$b-$n.txt" >&2; }
  done
done
cut -d' ' -f1-3 /proc/loadavg > "$out/load-after.txt"
fio_run after

python3 - "$out" "$model" "$budgets" "$batches" <<'PY'
import json, os, subprocess, sys, datetime
out, model, budgets, batches = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
fios = [json.load(open(f"{out}/fio-{w}.json"))["jobs"][0]["read"]["bw_bytes"] for w in ("before", "after")]
fio = max(fios)
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/Mem:/{print $2}'")
loads = [open(f"{out}/load-{w}.txt").read().strip() for w in ("before", "after")]
def ids_of(path):
    r = {}
    for l in open(path):
        o = json.loads(l)
        r[o["custom_id"]] = o["response"]["body"]["choices"][0]["token_ids"] if o["response"] else None
    return r
lines = ["## Jobs: continuous batching\n"]
lines.append(f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB RAM; model: the k3-slice "
             f"(`moestream synth --preset k3-slice --layers 3`). 16 jobs of 8-token prompts, 16 tokens each, greedy, "
             f"through `moestream jobs --max-batch N --ram-budget B --json-progress`; each run: page cache dropped, then "
             f"run in a memory cgroup whose limit is the budget. Disk: fio O_DIRECT random 16 MiB reads at queue depth 8, "
             f"before and after: {fios[0]/1e9:.2f} and {fios[1]/1e9:.2f} GB/s; the bound uses the larger, "
             f"**{fio/1e9:.2f} GB/s**. Load average (1, 5, 15 min) before the runs {loads[0]}, after {loads[1]}.\n")
lines.append("Command: `sudo bash tests/bench/jobs.sh`\n")
lines.append("| budget | max batch | tokens/s (aggregate) | x batch 1 | GB read / generated token | steps | peak RSS (cgroup) | OOM kills | bound tokens/s | of bound | ids = batch 1 |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
for b in budgets:
    base_tps, ref = None, None
    for n in batches:
        try:
            prog = [json.loads(l) for l in open(f"{out}/progress-{b}-{n}.txt") if l.startswith("{")]
            f = [p for p in prog if p.get("final")][-1]
            got = ids_of(f"{out}/out-{b}-{n}.jsonl")
        except Exception:
            lines.append(f"| {b} | {n} | failed | | | | | | | | |"); continue
        cg = dict(x.split("=") for x in open(f"{out}/cgroup-{b}-{n}.txt").read().split())
        if ref is None: ref = got
        tps = f["tokens_per_second"]
        if base_tps is None: base_tps = tps
        el, toks = f["elapsed_seconds"], f["generated_tokens"]
        # The bound: the bytes read at fio's bandwidth, or the compute (time not waiting on reads).
        t_io = f["bytes_read"] / fio
        t_cpu = max(0.0, el - f["io_wait_seconds"])
        bound = toks / max(t_io, t_cpu, 1e-9)
        lines.append(f"| {b} | {n} | {tps:.2f} | {tps/base_tps:.2f} | {f['bytes_read_per_token']/1e9:.2f} | {f['steps']} | "
                     f"{int(cg.get('peak','0'))/2**30:.2f} GiB | {cg.get('oom_kills','?')} | {bound:.2f} "
                     f"({'I/O' if t_io >= t_cpu else 'compute'}) | {tps/bound:.0%} | {'yes' if got == ref else 'NO'} |")
lines.append("")
lines.append("Columns: *tokens/s* is every generated token over the time after the model opened; *GB read / generated "
             "token* every byte read from disk in that time (streamed trunk and experts) over the tokens; *bound tokens/s* "
             "is the tokens over the longer of (bytes read / fio bandwidth) and the compute time (the time not waiting "
             "on reads), and which one it is; *ids = batch 1* compares every job's token ids with the batch-1 run.\n")
text = "\n".join(lines) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section("docs/PERFORMANCE.md", "## Jobs: continuous batching", text)
PY
rm -rf "$out"
