#!/usr/bin/env bash
# Kernels against the machine's limits: `moestream bench` with 1 thread and with every CPU: the
# FMA peak of each instruction set, the memory read bandwidth, and every weight kernel (f32,
# bf16, bf16 from trunk-pack blocks, mxfp4) at a Kimi K3 and a gpt-oss shape for T = 1..64 rows,
# as GFLOP/s and GB/s and their ratios to the widest FP32 peak and to the bandwidth.
# Writes docs/PERFORMANCE.md (section "Kernels against the machine's limits") and prints it.
# Run it on an idle machine: it measures the machine, and anything else running lowers it.
#
# usage: tests/bench/kernels.sh [--bin BINARY] [--seconds S] [--doc FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin= seconds=0.4 doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--seconds S] [--doc FILE]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
if [ -z "$bin" ]; then
  bench_build
  bin=$PWD/build/moestream
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
uptime > "$out/uptime-before.txt"
"$bin" bench --threads 1 --seconds "$seconds" --json > "$out/t1.json"
"$bin" bench --threads "$(nproc)" --seconds "$seconds" --json > "$out/tn.json"
uptime > "$out/uptime-after.txt"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")

python3 - "$out" "$doc" "$commit" <<'PY'
import json, os, subprocess, sys, datetime
out, path, commit = sys.argv[1:4]
t1, tn = json.load(open(f"{out}/t1.json")), json.load(open(f"{out}/tn.json"))
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
flags = sh("grep -o -w 'avx2\\|avx512f\\|fma' /proc/cpuinfo | sort -u | tr '\\n' ' '")
load = open(f"{out}/uptime-before.txt").read().split("load average:")[-1].strip()
L = ["## Kernels against the machine's limits\n",
     f"Measured {datetime.date.today()} at commit `{commit}` on {cpu} ({os.cpu_count()} CPUs; {flags.strip()}), "
     f"load average before: {load}. Command: `bash tests/bench/kernels.sh` (`moestream bench --json` with 1 "
     f"thread and with {tn['threads']}). Kernel path: {tn['kernel_path']}.\n",
     "| limit | 1 thread | %d threads |" % tn["threads"], "|---|---|---|"]
for k in tn["fma_peak_gflops"]:
    L.append(f"| FMA peak, {k} | {t1['fma_peak_gflops'].get(k, 0):.1f} GFLOP/s | {tn['fma_peak_gflops'][k]:.1f} GFLOP/s |")
L.append(f"| read bandwidth ({tn['read_bandwidth_bytes'] >> 20} MiB buffer) | {t1['read_bandwidth_gbs']:.1f} GB/s | "
         f"{tn['read_bandwidth_gbs']:.1f} GB/s |")
L.append("")
L.append(f"Every weight kernel with {tn['threads']} threads, weights resident (copies cycled, more than the caches "
         f"hold). *%peak* is of the widest FP32 FMA peak ({tn['fp32_peak_gflops']:.1f} GFLOP/s), *%bw* of the read "
         f"bandwidth ({tn['read_bandwidth_gbs']:.1f} GB/s); GB/s counts the weight bytes as stored (the coded bytes "
         f"for bf16-packed).\n")
Ts = sorted({r["T"] for r in tn["kernels"]})
L.append("| kernel | shape | " + " | ".join(f"T={t}" for t in Ts) + " |")
L.append("|---|---" + "|---" * len(Ts) + "|")
by = {}
for r in tn["kernels"]:
    by.setdefault((r["kernel"], r["shape"], r["rows"], r["cols"]), {})[r["T"]] = r
for (k, s, R, C), d in by.items():
    cells = []
    for t in Ts:
        r = d.get(t)
        cells.append(f"{r['gflops']:.1f} GF/s ({100*r['peak_ratio']:.0f}%), {r['gbs']:.2f} GB/s ({100*r['bw_ratio']:.0f}%)" if r else "")
    L.append(f"| {k} | {s} [{R} x {C}] | " + " | ".join(cells) + " |")
L.append("")
big = [r for r in tn["kernels"] if r["T"] >= 16 and r["kernel"] in ("bf16", "mxfp4")]
one = [r for r in tn["kernels"] if r["T"] == 1 and r["kernel"] in ("bf16", "mxfp4", "f32")]
if big and one:
    b = max(big, key=lambda r: r["peak_ratio"])
    o = min(one, key=lambda r: r["bw_ratio"])
    L.append(f"Issue 18's targets: BF16 and MXFP4 at T >= 16 at least 60% of the FP32 peak (best here: {b['kernel']} "
             f"at T={b['T']}, {100*b['peak_ratio']:.0f}%); at T = 1 at least 80% of the read bandwidth (worst here: "
             f"{o['kernel']} {o['shape']}, {100*o['bw_ratio']:.0f}%).\n")
f64 = tn["fma_peak_gflops"].get("fp64-avx2", 0)
if big and f64:
    b = max(big, key=lambda r: r["gflops"])
    L.append(f"Why, while the kernels accumulate in double (the contract in `ms_kern.h`): their compute bound is the "
             f"FP64 FMA peak, {f64:.1f} GFLOP/s = {100*f64/tn['fp32_peak_gflops']:.0f}% of the FP32 one, and the best "
             f"many-row kernel here ({b['kernel']}, T={b['T']}, {b['gflops']:.1f} GFLOP/s) reaches "
             f"{100*b['gflops']/f64:.0f}% of that bound: the weights are decoded into a buffer once per four rows and "
             f"re-read per token, and every element is also converted to double. MXFP4 at T = 1 is bound the same way "
             f"(4.25 bits a weight: few bytes, many FMAs), not by memory.\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(path, "## Kernels against the machine's limits", text)
PY
