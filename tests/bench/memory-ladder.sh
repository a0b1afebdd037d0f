#!/usr/bin/env bash
# Memory ladder: decode speed, peak RSS and disk traffic of a real-width Kimi K3 slice at several
# RAM budgets, each run under a memory cgroup equal to its budget with the page cache dropped
# first; logits compared bit for bit across budgets; the disk measured with fio on the same file.
# Writes the results to docs/PERFORMANCE.md (section "Memory ladder") and prints them.
#
# usage: tests/bench/memory-ladder.sh [--model DIR] [--budgets "1G 2G 4G 8G unlimited"] [-n N]
# Needs root (cgroups, drop_caches), ~41 GB of disk for the slice (written once with
# `moestream synth --preset k3-slice`), and fio (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G 2G 4G 8G unlimited"
ntok=8
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [-n N]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "memory-ladder: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_need_fio
bench_build
bin=$root/build/moestream
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

for b in $budgets; do
  drop
  args=(run --model "$model" --ids "$ids" -n "$ntok" --temperature 0 --json --quiet
        --dump-logits "$out/logits-$b.bin")
  if [ "$b" = unlimited ]; then
    "$bin" "${args[@]}" > "$out/run-$b.json"
    echo "limit=none peak=0 oom_kills=0" > "$out/cgroup-$b.txt"
  else
    bytes=$(to_bytes "$b")
    set +e
    bash tests/cgroup-run.sh "$bytes" "$out/cgroup-$b.txt" "$bin" "${args[@]}" --ram-budget "$b" > "$out/run-$b.json"
    rc=$?
    set -e
    [ $rc -eq 0 ] || { echo "memory-ladder: the run at $b failed with status $rc" >&2; cat "$out/cgroup-$b.txt" >&2; }
  fi
done

fio_run after

python3 - "$out" "$model" "$ntok" "$budgets" <<'PY'
import json, os, platform, subprocess, sys, hashlib, datetime
out, model, ntok, budgets = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
fios = [json.load(open(f"{out}/fio-{w}.json"))["jobs"][0]["read"]["bw_bytes"] for w in ("before", "after")]
fio = max(fios)
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/Mem:/{print $2}'")
rows, ref = [], None
for b in budgets:
    try: r = json.load(open(f"{out}/run-{b}.json"))
    except Exception: rows.append((b, None, None, None)); continue
    cg = open(f"{out}/cgroup-{b}.txt").read().split()
    lg = open(f"{out}/logits-{b}.bin", "rb").read()
    if ref is None: ref = lg
    rows.append((b, r, dict(x.split("=") for x in cg), lg == ref))
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
lines = []
lines.append("## Memory ladder (issue 3)\n")
lines.append(f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB RAM; "
             f"model: `moestream synth --preset k3-slice --layers 3` ({size/1e9:.1f} GB: dense layer 0, a KDA+MoE "
             f"and an MLA+MoE layer at the released K3 widths, 896 MXFP4 experts of 17,547,264 bytes per MoE layer). "
             f"Prompt of 8 tokens, {ntok} generated greedily. Each run: page cache dropped, then run inside a memory "
             f"cgroup whose limit equals `--ram-budget` (none for 'unlimited'). Disk: fio O_DIRECT random 16 MiB "
             f"reads at queue depth 8 on `{os.path.basename(sorted((os.path.getsize(os.path.join(model,f)),f) for f in os.listdir(model) if f.endswith('.safetensors'))[-1][1])}`, "
             f"before and after the ladder: {fios[0]/1e9:.2f} and {fios[1]/1e9:.2f} GB/s; the ratios use the larger, "
             f"**{fio/1e9:.2f} GB/s**.\n")
lines.append("Command: `sudo bash tests/bench/memory-ladder.sh`\n")
lines.append("| budget | decode s/token | prefill s | peak RSS | cgroup peak | OOM kills | trunk pinned | expert cache | GB read / decode token | expert hit rate | achieved read rate | / fio | I/O wait | logits = first row |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for b, r, cg, same in rows:
    if r is None:
        lines.append(f"| {b} | failed | | | | | | | | | | | | |"); continue
    s = r["stats"]; p = s.get("plan", {})
    dec = s["decode_seconds_per_token"]
    gb_tok = s["decode_bytes_read_per_token"] / 1e9
    hits, miss = s["expert_cache_hits"], s["expert_cache_misses"]
    hr = hits / max(1, hits + miss)
    rate = (s["bytes_read_experts"] + s["bytes_read_trunk"]) / max(1e-9, s["wall_seconds"] - s["load_seconds"])
    lines.append(f"| {b} | {dec:.2f} | {s['prefill_seconds']:.1f} | {s['peak_rss_bytes']/2**30:.2f} GiB | "
                 f"{int(cg.get('peak','0'))/2**30:.2f} GiB | {cg.get('oom_kills','?')} | "
                 f"{p.get('trunk_pinned_bytes',0)/2**30:.2f} GiB | {p.get('expert_cache_bytes',0)/2**30:.2f} GiB | "
                 f"{gb_tok:.2f} | {100*hr:.1f}% | {rate/1e9:.2f} GB/s | {rate/fio:.2f} | "
                 f"{100*s['io_wait_share']:.0f}% | {'yes' if same else 'NO'} |")
lines.append("")
lines.append("Columns: *decode s/token* excludes the prefill; *GB read / decode token* is what each decode "
             "step read (experts + streamed trunk); *achieved read rate* is every byte read after load over the "
             "run's wall time after load; *logits = first row* compares the `--dump-logits` file of each budget with the "
             "first budget's, bit for bit.\n")
text = "\n".join(lines) + "\n"
print(text)
path = "docs/PERFORMANCE.md"
doc = open(path).read() if os.path.exists(path) else "# Performance\n\nEvery number here comes from a script in `tests/bench/`; rerun it to check.\n\n"
start = doc.find("## Memory ladder")
if start >= 0:
    end = doc.find("\n## ", start + 3)
    doc = doc[:start] + text + (doc[end+1:] if end >= 0 else "")
else:
    doc = doc.rstrip("\n") + "\n\n" + text
open(path, "w").write(doc)
PY
rm -rf "$out"
