#!/usr/bin/env bash
# decode-step: what a decode step costs beside its weight bytes, the previous binary beside this
# one on a model that fits in RAM (warm page cache, no budget: the default, mapped where it fits):
# decode tokens/s and CPU seconds a token, greedy and sampled (temperature 1, top-p 1: every
# token of the vocabulary sorted each step, what a client's default asks for), runs alternating;
# and the malloc/calloc/realloc calls a decode token makes (tests/bench/malloc-count.c preloaded,
# a run of 8 tokens against one of 40: the difference over 32), the same tokens checked.
# Default model: the real-width gpt-oss-20b (`synth --preset gpt-oss-20b`). Writes
# docs/PERFORMANCE.md section "The decode step beside its bytes" and prints it.
#
# usage: tests/bench/decode-step.sh --old BINARY [--bin BINARY] [--model DIR] [--runs 3] [-n 32]
#          [--doc FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/gpt-oss-20b
runs=3 n=32 bin= old= doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--runs N] [-n N] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "decode-step: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
[ -f "$model/config.json" ] || { mkdir -p "$(dirname "$model")"; "$bin" synth --preset gpt-oss-20b --out "$model"; }
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")
python3 -c "
import random
r = random.Random(64)
print(','.join(str(r.randrange(1, $vocab)) for _ in range(64)))" > "$out/ids.txt"
cc -O2 -std=c11 -Wall -Wextra -shared -fPIC -o "$out/malloc-count.so" tests/bench/malloc-count.c

one() { # which mode tag args...
  local which=$1 mode=$2 tag=$3
  shift 3
  local exe=$bin samp=(--temperature 0)
  [ "$which" = old ] && exe=$old
  [ "$mode" = sampled ] && samp=(--temperature 1 --top-p 1 --seed 7)
  uptime > "$out/uptime-$tag.txt"
  "$exe" run --model "$model" --ids-file "$out/ids.txt" "${samp[@]}" --json --quiet "$@" > "$out/run-$tag.json" 2> "$out/err-$tag.txt" ||
    { echo "decode-step: $tag failed" >&2; tail -3 "$out/err-$tag.txt" >&2; }
}

"$bin" run --model "$model" --ids-file "$out/ids.txt" -n 1 --json --quiet > /dev/null 2>&1 || true # warm the page cache
for k in $(seq 1 "$runs"); do
  for mode in greedy sampled; do
    for which in old new; do
      one "$which" "$mode" "$which-$mode-$k" -n "$n"
      echo "decode-step: $which $mode run $k done" >&2
    done
  done
done
for which in old new; do
  for m in 8 40; do
    MS_MALLOC_COUNT_OUT="$out/mallocs-$which-$m.txt" LD_PRELOAD="$out/malloc-count.so" one "$which" sampled "$which-count-$m" -n "$m"
  done
done

python3 - "$out" "$model" "$runs" "$n" "$doc" "$vocab" <<'PY'
import json, os, subprocess, sys, datetime, statistics
out, model, runs, n, path, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/^Mem:/ {print $2}'")
def load(tag):
    try: return json.load(open(f"{out}/run-{tag}.json"))
    except Exception: return None
lines = ["## The decode step beside its bytes\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB of RAM; model: "
         f"`{os.path.basename(model.rstrip('/'))}` (vocabulary {vocab:,}), warm page cache, no `--ram-budget`, a 64-token "
         f"prompt of random ids, {n} tokens; *greedy* at temperature 0, *sampled* at temperature 1 and top-p 1 (seed 7: "
         f"every step sorts the whole vocabulary). *old* is the previous binary, *new* this one, runs alternating; "
         f"each cell lists the runs. *CPU s/token* is user + system CPU of the decode over its tokens. *mallocs/token*: "
         f"malloc, calloc and realloc calls on every thread (tests/bench/malloc-count.c preloaded), a run of 40 "
         f"tokens less one of 8, over 32 (sampled; `--json`, so no text is printed per token).\n",
         "Command: `bash tests/bench/decode-step.sh --old OLD_BINARY`\n",
         "| mode | binary | decode tok/s | CPU s/token | mallocs/token | tokens = old |",
         "|---|---|---|---|---|---|"]
for mode in ("greedy", "sampled"):
    for which in ("old", "new"):
        tps, cpu_t, same = [], [], []
        for k in range(1, runs + 1):
            j, ref = load(f"{which}-{mode}-{k}"), load(f"old-{mode}-{k}")
            if not j: continue
            s = j["stats"]
            tps.append(s["decode_tokens_per_second"])
            nt = max(1, len(j["generated_ids"]) - 1)
            cpu_t.append((s["cpu_user_seconds_decode"] + s["cpu_sys_seconds_decode"]) / nt)
            same.append(ref is not None and ref["generated_ids"] == j["generated_ids"])
        mc = ""
        if mode == "sampled":
            try:
                a = int(open(f"{out}/mallocs-{which}-8.txt").read()); b = int(open(f"{out}/mallocs-{which}-40.txt").read())
                mc = f"{(b - a) / 32:.1f}"
            except Exception:
                mc = "?"
        lines.append(f"| {mode} | {which} | {', '.join(f'{x:.2f}' for x in tps)} | {', '.join(f'{x:.3f}' for x in cpu_t)} | "
                     f"{mc} | {'yes' if same and all(same) else 'NO'} |")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## The decode step beside its bytes", text)
PY
