#!/usr/bin/env bash
# Threads (issue 18, part 5): what 1 thread, N threads and N threads bound to their CPUs
# (--pin-threads) give on this machine, N = every CPU the process may use:
#   - `moestream bench`: the FP32 FMA peak, the read bandwidth and the BF16 / MXFP4 kernels at
#     T = 1 (bandwidth-bound) and T = 16 (compute-bound) at a K3 shape;
#   - the `small` synthetic K3 model in RAM (warm page cache, --buffered-io): `run` with a
#     64-token prompt then 64 tokens (prefill and decode tokens/s), and `jobs` with 32 jobs at
#     --max-batch 8 (generated tokens/s over the whole run).
# Configurations alternate within each round; each figure is the median of the rounds. The
# token ids of every run must agree (the thread count never changes a result).
# --model DIR runs that model instead of `small` (e.g. the real-width dense layer of K3,
# `moestream synth --preset k3-slice --layers 1`), with 16 generated tokens a run and 16 jobs of
# 16, in its own section "Threads: DIR's name".
# Writes docs/PERFORMANCE.md (section "Threads") and prints it. Run it on an idle machine.
#
# usage: tests/bench/threads.sh [--bin BINARY] [--rounds N] [--doc FILE] [--model DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin= rounds=3 doc=docs/PERFORMANCE.md model=
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --model) model=$(realpath "$2"); shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--rounds N] [--doc FILE] [--model DIR]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
bench_bin_out
n=$(nproc)
if [ -z "$model" ]; then
  "$bin" synth --preset small --out "$out/small" > /dev/null
  model=$out/small name=small njobs=32 ntok=32 ngen=64
else
  name=$(basename "$model") njobs=16 ntok=16 ngen=16
fi
python3 - "$out/jobs.jsonl" "$njobs" "$ntok" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"custom_id": f"j{i}", "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": [(7 * i + 3 * k) % 500 + 1 for k in range(8)], "max_tokens": int(sys.argv[3])}}) + "\n")
PY
ids64=$(python3 -c "print(','.join(str((11 * k) % 500 + 1) for k in range(64)))")
uptime > "$out/uptime-before.txt"
cat "$model"/*.safetensors > /dev/null # warm
configs="1 $n ${n}p"
for r in $(seq "$rounds"); do
  for c in $configs; do
    t=${c%p}
    pin=()
    [ "$c" != "$t" ] && pin=(--pin-threads)
    "$bin" bench --threads "$t" "${pin[@]}" --seconds 0.3 --rows 1,16 --bw-bytes 512M --json > "$out/bench-$c-$r.json"
    "$bin" run --model "$model" --ids "$ids64" -n "$ngen" --temperature 0 --threads "$t" "${pin[@]}" --buffered-io --json \
      --quiet > "$out/run-$c-$r.json"
    t0=$(date +%s.%N)
    "$bin" jobs --model "$model" --input "$out/jobs.jsonl" --output "$out/jobs-$c-$r.jsonl" --max-batch 8 \
      --threads "$t" "${pin[@]}" --buffered-io --quiet
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$out/jobs-$c-$r.time"
  done
done
uptime > "$out/uptime-after.txt"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")

python3 - "$out" "$doc" "$commit" "$rounds" "$configs" "$name" "$njobs" "$ntok" "$ngen" <<'PY'
import json, os, subprocess, sys, datetime, statistics
out, doc, commit, rounds, configs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
name, njobs, ntok, ngen = sys.argv[6], int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
title = "## Threads" if name == "small" else f"## Threads: {name}"
what = ("the `small` synthetic K3 model" if name == "small" else f"`{name}`")
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def load(f): return open(f"{out}/{f}").read().split("load average:")[-1].strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
topo = sh("lscpu | sed -n 's/^Thread(s) per core: *//p;s/^Socket(s): *//p;s/^NUMA node(s): *//p' | tr '\\n' ' '").split()
med = lambda xs: statistics.median(xs)
rows, ids, ok, spread = {}, None, True, {}
for c in configs:
    B = [json.load(open(f"{out}/bench-{c}-{r}.json")) for r in range(1, rounds + 1)]
    R = [json.load(open(f"{out}/run-{c}-{r}.json")) for r in range(1, rounds + 1)]
    J = []
    for r in range(1, rounds + 1):
        t0, t1 = map(float, open(f"{out}/jobs-{c}-{r}.time").read().split())
        lines = [json.loads(x) for x in open(f"{out}/jobs-{c}-{r}.jsonl")]
        toks = sum(x["response"]["body"]["usage"]["completion_tokens"] for x in lines)
        J.append(toks / (t1 - t0))
        got = sorted((x["custom_id"], x["response"]["body"]["choices"][0].get("token_ids") or x["response"]["body"]["choices"][0]["text"]) for x in lines)
        sig = (tuple(R[r - 1]["generated_ids"]), json.dumps(got))
        if ids is None: ids = sig
        ok = ok and sig == ids
    def kern(b, k, T):
        return next(x["gflops"] for x in b["kernels"] if x["kernel"] == k and x["T"] == T and x["shape"].startswith("k3"))
    spread[c] = max(max(v) / min(v) for v in (
        [b["fp32_peak_gflops"] for b in B], [kern(b, "bf16", 16) for b in B], [kern(b, "mxfp4", 16) for b in B],
        [x["stats"]["prefill_tokens_per_second"] for x in R], [x["stats"]["decode_tokens_per_second"] for x in R], J))
    rows[c] = {
        "threads": B[0]["threads"], "pinned": B[0]["threads_pinned"], "run_pinned": R[0]["stats"]["threads_pinned"],
        "peak": med([b["fp32_peak_gflops"] for b in B]), "bw": med([b["read_bandwidth_gbs"] for b in B]),
        "bf1": med([kern(b, "bf16", 1) for b in B]), "bf16": med([kern(b, "bf16", 16) for b in B]),
        "mx1": med([kern(b, "mxfp4", 1) for b in B]), "mx16": med([kern(b, "mxfp4", 16) for b in B]),
        "pre": med([x["stats"]["prefill_tokens_per_second"] for x in R]),
        "dec": med([x["stats"]["decode_tokens_per_second"] for x in R]), "jobs": med(J)}
L = [title + "\n",
     f"Measured {datetime.date.today()} at commit `{commit}` on {cpu} ({os.cpu_count()} CPUs; threads per core, "
     f"sockets, NUMA nodes: {', '.join(topo)}), load average before: {load('uptime-before.txt')}, after: "
     f"{load('uptime-after.txt')}. Command: `bash tests/bench/threads.sh --rounds {rounds}{'' if name == 'small' else ' --model ' + name}`: the configurations "
     f"alternate within each round; each figure is the median of {rounds}. Kernels: `moestream bench` at a K3 shape "
     f"(bf16: the attention projection 8192 x 7168; mxfp4: an expert's up 3072 x 3584). Model: {what} in RAM (warm "
     f"page cache, `--buffered-io`): `run` with a 64-token prompt then {ngen} tokens, `jobs` with {njobs} jobs of "
     f"{ntok} tokens at `--max-batch 8`.\n",
     "| threads | bound to CPUs | FP32 FMA peak | read GB/s | bf16 T=1 | bf16 T=16 | mxfp4 T=1 | mxfp4 T=16 | prefill tokens/s | decode tokens/s | jobs tokens/s (batch 8) |",
     "|---|---|---|---|---|---|---|---|---|---|---|"]
for c in configs:
    x = rows[c]
    L.append(f"| {x['threads']} | {x['run_pinned'] if c.endswith('p') else 0} | {x['peak']:.1f} GFLOP/s | {x['bw']:.1f} | "
             f"{x['bf1']:.1f} GF/s | {x['bf16']:.1f} GF/s | {x['mx1']:.1f} GF/s | {x['mx16']:.1f} GF/s | {x['pre']:.1f} | "
             f"{x['dec']:.1f} | {x['jobs']:.1f} |")
a, b, p = rows[configs[0]], rows[configs[1]], rows[configs[2]]
L.append("")
L.append(f"From 1 to {b['threads']} threads: FMA peak {b['peak'] / a['peak']:.2f}x, read bandwidth {b['bw'] / a['bw']:.2f}x, "
         f"bf16 T=16 {b['bf16'] / a['bf16']:.2f}x, mxfp4 T=16 {b['mx16'] / a['mx16']:.2f}x, prefill {b['pre'] / a['pre']:.2f}x, "
         f"decode {b['dec'] / a['dec']:.2f}x, jobs {b['jobs'] / a['jobs']:.2f}x. Bound to their CPUs against not: "
         f"prefill {p['pre'] / b['pre']:.2f}x, decode {p['dec'] / b['dec']:.2f}x, jobs {p['jobs'] / b['jobs']:.2f}x. "
         f"Token ids of every run {'the same' if ok else 'DIFFERENT'} for every configuration. The spread between "
         f"rounds (the largest max / min of a column's {rounds} runs): "
         + ", ".join(f"{rows[c]['threads']} threads{' bound' if c.endswith('p') else ''} {spread[c]:.2f}x" for c in configs)
         + ".\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(doc, title, text)
PY
