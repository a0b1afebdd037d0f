#!/usr/bin/env bash
# Compute-bound steps end to end: the `small` synthetic K3 model in RAM (no budget, everything
# resident, warm page cache), so the kernels and not the disk set the pace:
#   - `jobs`: 16 jobs (8-token prompts, 16 tokens each) at --max-batch 1 and 8: generated tokens/s;
#   - `run`: a 64-token prompt then 16 tokens: prefill tokens/s against decode tokens/s.
# Issue 18's targets: batch 8 at least 3x batch 1; prefill at least 5x decode per token. With
# --old BINARY (e.g. a build of an earlier commit) the same runs side by side. Every run's token
# ids are compared: batch 8 with batch 1 (and with the old binary only when it has the same
# floating-point contract). Writes docs/PERFORMANCE.md (section "Compute-bound steps") and prints it.
# --model DIR runs another model instead (e.g. the real-width dense layer of K3:
# `moestream synth --preset k3-slice --layers 1`), --batch N the batched runs' size (default 8);
# such a run has its own section, "Compute-bound steps: DIR's name".
#
# usage: tests/bench/compute.sh [--bin BINARY] [--old BINARY] [--threads N] [--doc FILE] [--model DIR] [--batch N]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin= old= threads=$(nproc) doc=docs/PERFORMANCE.md model= batch=8
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --old) old=$(realpath "$2"); shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --model) model=$(realpath "$2") model_arg=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--old BINARY] [--threads N] [--doc FILE] [--model DIR] [--batch N]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
if [ -z "$bin" ]; then
  bench_build
  bin=$PWD/build/moestream
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -z "$model" ]; then
  "$bin" synth --preset small --out "$out/small" > /dev/null
  model=$out/small section="Compute-bound steps" what="The \`small\` synthetic K3 model (about 650 MB)"
else
  section="Compute-bound steps: $(basename "$model")"
  what="The model $model ($(du -sh "$model" | cut -f1))"
fi
python3 - "$out/jobs.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(16):
        f.write(json.dumps({"custom_id": f"j{i}", "method": "POST", "url": "/v1/completions", "body": {"prompt": [(7 * i + 3 * k) % 500 + 1 for k in range(8)],
                                                        "max_tokens": 16}}) + "\n")
PY
ids64=$(python3 -c "print(','.join(str((11 * k) % 500 + 1) for k in range(64)))")
measure() { # TAG BINARY
  local tag=$1 b=$2
  cat "$model"/*.safetensors > /dev/null # warm
  for mb in 1 "$batch"; do
    rm -f "$out/$tag-b$mb.jsonl"
    local t0 t1
    t0=$(date +%s.%N)
    "$b" jobs --model "$model" --input "$out/jobs.jsonl" --output "$out/$tag-b$mb.jsonl" --max-batch "$mb" \
      --threads "$threads" --quiet
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$out/$tag-b$mb.time"
  done
  "$b" run --model "$model" --ids "$ids64" -n 16 --temperature 0 --threads "$threads" --json --quiet > "$out/$tag-run.json"
}
measure new "$bin"
[ -z "$old" ] || measure old "$old"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
python3 - "$out" "$doc" "$commit" "$threads" "${old:+yes}" "$batch" "$section" "$what" "${model_arg:-}" <<'PY'
import json, os, subprocess, sys, datetime
out, path, commit, threads, has_old = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "yes"
B, section, what = int(sys.argv[6]), sys.argv[7], sys.argv[8]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def jobs(tag, mb):
    t0, t1 = map(float, open(f"{out}/{tag}-b{mb}.time").read().split())
    lines = [json.loads(l) for l in open(f"{out}/{tag}-b{mb}.jsonl")]
    toks = {l["custom_id"]: l["response"]["body"]["choices"][0]["token_ids"] for l in lines}
    return sum(len(v) for v in toks.values()) / (t1 - t0), toks
def run(tag):
    s = json.load(open(f"{out}/{tag}-run.json"))["stats"]
    return s["prefill_tokens_per_second"], s["decode_tokens_per_second"], json.load(open(f"{out}/{tag}-run.json"))["generated_ids"]
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
L = ["## " + section + "\n",
     f"Measured {datetime.date.today()} at commit `{commit}` on {cpu}, "
     f"{threads} threads. Command: `bash tests/bench/compute.sh" + (" --old OLD_BINARY" if has_old else "") +
     (f" --model {sys.argv[9]}" if sys.argv[9] else "") +
     (f" --batch {B}" if B != 8 else "") + "`. "
     f"{what} in RAM, warm page cache, no budget: the kernels set the pace. "
     "Jobs: 16 jobs of 8-token prompts and 16 generated tokens; run: a 64-token prompt then 16 tokens.\n",
     f"| binary | jobs tokens/s, batch 1 | batch {B} | batch {B} / batch 1 | batch {B} ids = batch 1's | prefill tokens/s (64) | decode tokens/s | prefill / decode |",
     "|---|---|---|---|---|---|---|---|"]
for tag in (["new", "old"] if has_old else ["new"]):
    b1, i1 = jobs(tag, 1)
    b8, i8 = jobs(tag, B)
    p, d, _ = run(tag)
    name = f"this commit (`{commit}`)" if tag == "new" else "the old binary"
    L.append(f"| {name} | {b1:.1f} | {b8:.1f} | {b8/b1:.2f}x | {'yes' if i1 == i8 else 'NO'} | {p:.1f} | {d:.1f} | {p/d:.2f}x |")
L.append("")
L.append("Issue 18's targets: on `small`, batch 8 at least 3x batch 1 and prefill of a 64-token prompt at least 5x decode "
         "per token; on the real-width dense layer (k3-slice, 1 layer), batch 16 at least 3x batch 1.\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(path, "## " + section + "\n", text)
PY
