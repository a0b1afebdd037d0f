#!/usr/bin/env bash
# Memory ladder: decode speed, peak RSS and disk traffic of a real-width Kimi K3 slice at several
# RAM budgets and two run lengths, each run under a memory cgroup equal to its budget with the
# page cache dropped first; logits compared bit for bit across budgets; the disk measured with
# fio on the same file; the decode's page faults, CPU time, I/O wait and cache hits beside each
# row (they explain it and do not depend on other load), and `uptime` next to each timing.
# Writes the results to docs/PERFORMANCE.md (section "Memory ladder") and prints them.
#
# usage: tests/bench/memory-ladder.sh [--model DIR] [--budgets "1G 2G 4G 8G unlimited"]
#          [--lengths "8 128"] [--bin BINARY (no build)] [--doc FILE]
# Needs root (cgroups, drop_caches), ~41 GB of disk for the slice (written once with
# `moestream synth --preset k3-slice`), and fio (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G 2G 4G 8G unlimited"
lengths="8 128"
bin=
doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --lengths|-n) lengths=$2; shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [--lengths LIST] [--bin BINARY] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "memory-ladder: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_need_fio
if [ -z "$bin" ]; then
  bench_build
  bin=$root/build/moestream
fi
out=$(mktemp -d)
bench_slice "$bin" "$model"
ids="100,2000,30000,4000,500,60000,7000,80"

# The disk's own bandwidth: O_DIRECT random 16 MiB reads, queue depth 8, on the largest shard,
# measured before and after the ladder (a VM's disk varies; the larger is used, which makes
# the ratios below conservative).
shard=$(ls -S "$model"/*.safetensors | head -n 1)
fio_run() {
  drop
  fio --name=ladder --filename="$shard" --readonly --direct=1 --rw=randread --bs=16M --iodepth=8 \
      --ioengine=libaio --runtime=20 --time_based --output-format=json > "$out/fio-$1.json" 2>/dev/null
}
fio_run before

for n in $lengths; do
  for b in $budgets; do
    drop
    r=$n-$b
    uptime > "$out/uptime-$r.txt"
    args=(run --model "$model" --ids "$ids" -n "$n" --temperature 0 --json --quiet
          --dump-logits "$out/logits-$r.bin")
    if [ "$b" = unlimited ]; then
      set +e
      "$bin" "${args[@]}" > "$out/run-$r.json"
      rc=$?
      set -e
      [ $rc -eq 0 ] || echo "memory-ladder: the run without a budget, $n tokens failed with status $rc" >&2
      echo "limit=none peak=0 oom_kills=0" > "$out/cgroup-$r.txt"
    else
      bytes=$(to_bytes "$b")
      set +e
      bash tests/cgroup-run.sh "$bytes" "$out/cgroup-$r.txt" "$bin" "${args[@]}" --ram-budget "$b" > "$out/run-$r.json"
      rc=$?
      set -e
      [ $rc -eq 0 ] || { echo "memory-ladder: the run at $b, $n tokens failed with status $rc" >&2; cat "$out/cgroup-$r.txt" >&2; }
    fi
    echo "memory-ladder: $n tokens at $b done ($(cut -d, -f3- < "$out/uptime-$r.txt" | xargs))" >&2
  done
done

fio_run after

python3 - "$out" "$model" "$lengths" "$budgets" "$doc" <<'PY'
import json, os, subprocess, sys, datetime
out, model, lengths, budgets, path = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
fios = [json.load(open(f"{out}/fio-{w}.json"))["jobs"][0]["read"]["bw_bytes"] for w in ("before", "after")]
fio = max(fios)
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/Mem:/{print $2}'")
shards = sorted((os.path.getsize(os.path.join(model, f)), f) for f in os.listdir(model) if f.endswith(".safetensors"))
size = sum(s for s, _ in shards)
G = 2**30
lines = ["## Memory ladder\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB RAM; "
         f"model: `moestream synth --preset k3-slice --layers 3` ({size/1e9:.1f} GB: dense layer 0, a KDA+MoE "
         f"and an MLA+MoE layer at the released K3 widths, 896 MXFP4 experts of 17,547,264 bytes per MoE layer). "
         f"Prompt of 8 tokens, then {' and '.join(lengths)} generated greedily. Each run: page cache dropped, then run inside a memory "
         f"cgroup whose limit equals `--ram-budget` (none for 'unlimited'). Disk: fio O_DIRECT random 16 MiB "
         f"reads at queue depth 8 on `{shards[-1][1]}`, before and after the ladder: {fios[0]/1e9:.2f} and "
         f"{fios[1]/1e9:.2f} GB/s; the ratios use the larger, **{fio/1e9:.2f} GB/s**.\n",
         "Command: `sudo bash tests/bench/memory-ladder.sh`\n"]
for n in lengths:
    rows, ref = [], None
    for b in budgets:
        r = f"{n}-{b}"
        up = open(f"{out}/uptime-{r}.txt").read().split("load average:")[-1].split(",")[0].strip()
        try: j = json.load(open(f"{out}/run-{r}.json"))
        except Exception: rows.append((b, None, None, None, up)); continue
        cg = dict(x.split("=") for x in open(f"{out}/cgroup-{r}.txt").read().split())
        lg = open(f"{out}/logits-{r}.bin", "rb").read()
        if ref is None: ref = lg
        rows.append((b, j, cg, lg == ref, up))
    lines.append(f"**{n} tokens.**\n")
    lines.append("| budget | decode s/token | load s | prefill s | peak RSS | cgroup peak | OOM kills | trunk pinned | expert cache | cache used | "
                 "GB read / decode token | decode hit rate | decode I/O wait / token | decode minor faults / token | decode sys s / token | "
                 "achieved read rate | / fio | load avg | logits = first row |")
    lines.append("|---" * 19 + "|")
    for b, j, cg, same, up in rows:
        if j is None:
            lines.append(f"| {b} | failed |" + " |" * 16 + f" {up} | |"); continue
        s = j["stats"]; p = s.get("plan", {}); d = s.get("decode", {})
        steps = max(1, s["generated_tokens"] - 1)
        h, m = d.get("expert_cache_hits", 0), d.get("expert_cache_misses", 0)
        rate = (s["bytes_read_experts"] + s["bytes_read_trunk"]) / max(1e-9, s["wall_seconds"] - s["load_seconds"])
        lines.append(f"| {b} | {s['decode_seconds_per_token']:.2f} | {s['load_seconds']:.1f} | {s['prefill_seconds']:.1f} | "
                     f"{s['peak_rss_bytes']/G:.2f} GiB | {int(cg.get('peak','0'))/G:.2f} GiB | {cg.get('oom_kills','?')} | "
                     f"{p.get('trunk_pinned_bytes',0)/G:.2f} GiB | {p.get('expert_cache_bytes',0)/G:.2f} GiB | "
                     f"{s['expert_cache_peak_bytes']/G:.2f} GiB | {s['decode_bytes_read_per_token']/1e9:.2f} | "
                     f"{100*h/max(1,h+m):.1f}% | {d.get('io_wait_seconds',0)/steps:.2f} s | {d.get('minor_faults',0)/steps:.0f} | "
                     f"{d.get('sys_seconds',0)/steps:.2f} | {rate/1e9:.2f} GB/s | {rate/fio:.2f} | {up} | {'yes' if same else 'NO'} |")
    lines.append("")
lines.append("Columns: *decode s/token* excludes the prefill; *cache used* is the most the expert cache held "
             "(it grows into slots a background thread faults in, see below); *GB read / decode token* is what each "
             "decode step read (experts + streamed trunk); *decode ...* columns count the decode steps only: the "
             "expert cache's hit rate, the time the computing thread waited for reads, and the process's minor page "
             "faults and kernel CPU time (all threads) per step; *achieved read rate* is every byte read after load "
             "over the run's wall time after load; *load avg* is the 1-minute `uptime` load when the run started "
             "(2 cores; other work on the machine slows the timings, not the counters); *logits = first row* "
             "compares the `--dump-logits` file of each budget with the first budget's, bit for bit.\n")
text = "\n".join(lines) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(path, "## Memory ladder", text)
PY
rm -rf "$out"
