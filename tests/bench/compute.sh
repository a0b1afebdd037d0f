#!/usr/bin/env bash
# Compute-bound steps end to end: the `small` synthetic K3 model in RAM (no budget, everything
# resident, warm page cache), so the kernels and not the disk set the pace:
#   - `jobs`: 64 jobs (8-token prompts, 32 tokens each; 16 x 16 with --model) at --max-batch 1 and 8:
#     generated tokens/s over the whole run (the model's open included);
#   - `run`: a 64-token prompt then 64 tokens: prefill tokens/s against decode tokens/s.
# Issue 18's targets: batch 8 at least 3x batch 1; prefill at least 5x decode per token. With
# --old BINARY (e.g. a build of an earlier commit) the same runs side by side. Every run's token
# ids are compared: batch 8 with batch 1 (and with the old binary only when it has the same
# floating-point contract). Every run reads through the page cache (--buffered-io), warmed first, so
# the weights come from RAM (O_DIRECT would read the experts from the device on each first use).
# Next to the ratios, the weight-bytes bound: the bytes a token needs at batch 1 over those at batch
# B (the trunk once per step, each distinct routed expert once per step, for uniform routing), the
# best a batch can gain where each weight byte costs the same at any batch size; likewise for the
# prefill. Writes docs/PERFORMANCE.md (section "Compute-bound steps") and prints it.
# --model DIR runs another model instead (e.g. the real-width dense layer of K3:
# `moestream synth --preset k3-slice --layers 1`), --batch N the batched runs' size (default 8);
# such a run has its own section, "Compute-bound steps: DIR's name".
#
# --jobs N and --tokens N set the jobs file (defaults above); --rounds N the rounds (default 3).
#
# usage: tests/bench/compute.sh [--bin BINARY] [--old BINARY] [--threads N] [--doc FILE] [--model DIR] [--batch N]
#                               [--jobs N] [--tokens N] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin= old= threads=$(nproc) doc=docs/PERFORMANCE.md model= batch=8 njobs= ntok= rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --old) old=$(realpath "$2"); shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --model) model=$(realpath "$2") model_arg=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --jobs) njobs=$2; shift 2 ;;
    --tokens) ntok=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--old BINARY] [--threads N] [--doc FILE] [--model DIR] [--batch N] [--jobs N] [--tokens N] [--rounds N]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
bench_bin_out
if [ -z "$model" ]; then
  "$bin" synth --preset small --out "$out/small" > /dev/null
  model=$out/small section="Compute-bound steps" what="The \`small\` synthetic K3 model (about 650 MB)"
  njobs=${njobs:-64} ntok=${ntok:-32}
else
  section="Compute-bound steps: $(basename "$model")"
  what="The model $model ($(du -sh "$model" | cut -f1))"
  njobs=${njobs:-16} ntok=${ntok:-16}
fi
python3 - "$out/jobs.jsonl" "$njobs" "$ntok" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"custom_id": f"j{i}", "method": "POST", "url": "/v1/completions", "body": {"prompt": [(7 * i + 3 * k) % 500 + 1 for k in range(8)],
                                                        "max_tokens": int(sys.argv[3])}}) + "\n")
PY
ids64=$(python3 -c "print(','.join(str((11 * k) % 500 + 1) for k in range(64)))")
measure() { # TAG BINARY REP
  local tag=$1 b=$2 r=$3
  cat "$model"/*.safetensors > /dev/null # warm
  for mb in 1 "$batch"; do
    rm -f "$out/$tag-b$mb-$r.jsonl"
    local t0 t1
    t0=$(date +%s.%N)
    "$b" jobs --model "$model" --input "$out/jobs.jsonl" --output "$out/$tag-b$mb-$r.jsonl" --max-batch "$mb" \
      --threads "$threads" --buffered-io --quiet
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$out/$tag-b$mb-$r.time"
  done
  "$b" run --model "$model" --ids "$ids64" -n 64 --temperature 0 --threads "$threads" --buffered-io --json --quiet > "$out/$tag-run-$r.json"
}
# Rounds, the binaries alternating within each; the tables give each figure's median.
for r in $(seq "$rounds"); do
  measure new "$bin" $r
  [ -z "$old" ] || measure old "$old" $r
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
python3 - "$out" "$doc" "$commit" "$threads" "${old:+yes}" "$batch" "$section" "$what" "${model_arg:-}" "$model" "$njobs" "$ntok" "$rounds" <<'PY'
import json, os, subprocess, sys, datetime
out, path, commit, threads, has_old = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "yes"
B, section, what = int(sys.argv[6]), sys.argv[7], sys.argv[8]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
R = range(1, int(sys.argv[13]) + 1)
def median(v): return sorted(v)[len(v) // 2]
def jobs(tag, mb):
    rates, ids = [], []
    for r in R:
        t0, t1 = map(float, open(f"{out}/{tag}-b{mb}-{r}.time").read().split())
        lines = [json.loads(l) for l in open(f"{out}/{tag}-b{mb}-{r}.jsonl")]
        toks = {l["custom_id"]: l["response"]["body"]["choices"][0]["token_ids"] for l in lines}
        rates.append(sum(len(v) for v in toks.values()) / (t1 - t0))
        ids.append(toks)
    return median(rates), ids[0] if all(i == ids[0] for i in ids) else None
def run(tag):
    rs = [json.load(open(f"{out}/{tag}-run-{r}.json")) for r in R]
    same = all(x["generated_ids"] == rs[0]["generated_ids"] for x in rs)
    return (median([x["stats"]["prefill_tokens_per_second"] for x in rs]),
            median([x["stats"]["decode_tokens_per_second"] for x in rs]), rs[0]["generated_ids"] if same else None)
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
njobs, ntok = int(sys.argv[11]), int(sys.argv[12])
# The weight-bytes bound (uniform routing): bytes per token at batch 1 over bytes per token at batch T.
st = json.load(open(f"{out}/new-run-1.json"))["stats"]
cfg = json.load(open(sys.argv[10] + "/config.json"))
tc = cfg.get("text_config", cfg)
trunk = st["plan"]["trunk_pinned_bytes"] + st["plan"]["trunk_streamed_bytes"]
E, k = tc.get("num_experts", 0), tc.get("num_experts_per_token", 0)
moe_layers = tc["num_hidden_layers"] - tc.get("first_k_dense_replace", 0) if E else 0
def per_token(T):
    distinct = E * (1 - (1 - k / E) ** T) if E else 0
    return (trunk + moe_layers * distinct * st["expert_bytes"]) / T
bound = lambda T: per_token(1) / per_token(T)
L = ["## " + section + "\n",
     f"Measured {datetime.date.today()} at commit `{commit}` on {cpu}, "
     f"{threads} threads. Command: `bash tests/bench/compute.sh" + (" --old OLD_BINARY" if has_old else "") +
     (f" --model {sys.argv[9]}" if sys.argv[9] else "") +
     (f" --batch {B}" if B != 8 else "") + (f" --rounds {len(R)}" if len(R) != 3 else "") + "`. "
     f"{what} in RAM, warm page cache, no budget: the kernels set the pace. "
     f"Jobs: {njobs} jobs of 8-token prompts and {ntok} generated tokens; run: a 64-token prompt then 64 tokens. "
     "Every run reads through the page cache (`--buffered-io`, warmed first): the weights come from RAM. "
     f"{len(R)} rounds, the binaries alternating; each figure is the median of {len(R)} runs (the ids of all of them must agree).\n",
     f"| binary | jobs tokens/s, batch 1 | batch {B} | batch {B} / batch 1 | batch {B} ids = batch 1's | prefill tokens/s (64) | decode tokens/s | prefill / decode |",
     "|---|---|---|---|---|---|---|---|"]
for tag in (["new", "old"] if has_old else ["new"]):
    b1, i1 = jobs(tag, 1)
    b8, i8 = jobs(tag, B)
    p, d, _ = run(tag)
    name = f"this commit (`{commit}`)" if tag == "new" else "the old binary"
    L.append(f"| {name} | {b1:.1f} | {b8:.1f} | {b8/b1:.2f}x | {'yes' if i1 is not None and i1 == i8 else 'NO'} | {p:.1f} | {d:.1f} | {p/d:.2f}x |")
L.append("")
L.append(f"Weight-bytes bound (uniform routing; trunk {trunk / 2**20:.1f} MiB read once a step, " +
         (f"{moe_layers} MoE layers of {E} experts, {k} a token, {st['expert_bytes'] / 2**10:.0f} KiB each" if E else "no routed experts") +
         f"): batch {B} at most **{bound(B):.2f}x** batch 1, prefill of 64 at most **{bound(64):.2f}x** decode per token, "
         "where a weight byte costs the same at every batch size.\n")
L.append("Issue 18's targets: on `small`, batch 8 at least 3x batch 1 and prefill of a 64-token prompt at least 5x decode "
         "per token; on the real-width dense layer (k3-slice, 1 layer), batch 16 at least 3x batch 1.\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(path, "## " + section + "\n", text)
PY
