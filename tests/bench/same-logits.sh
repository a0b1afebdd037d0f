#!/usr/bin/env bash
# Same logits as an earlier commit: builds REV in a temporary worktree and compares the logits
# of `moestream run` (REV's binary vs this tree's) on the real-width k3-slice, in the
# configurations the memory-ladder and workers benchmarks use: 1 GiB and no budget in process,
# 3 local workers at 1 GiB and 8 GiB. For refactors that must not change a bit.
# Appends the result to docs/PERFORMANCE.md (section "Same logits across versions").
#
# usage: tests/bench/same-logits.sh REV [--model DIR] [-n N]
# Needs ~41 GB of disk for the slice (written once with `moestream synth --preset k3-slice`).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
usage="usage: $0 REV [--family k3|gptoss] [--model DIR] [-n N] [--expect-change]"
rev=${1:?$usage}
shift
family=k3 model="" ntok=8 expect_change=0
while [ $# -gt 0 ]; do
  case $1 in
    --family) family=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --expect-change) expect_change=1; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case $family in
  k3) model=${model:-${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3}; configs=("1G 0" "unlimited 0" "1G 3" "8G 3")
      what="k3-slice (3 layers, real widths)" ;;
  gptoss) model=${model:-${MS_BENCH_DIR:-$root/build-bench}/gpt-oss-20b}; configs=("unlimited 0" "4G 0")
      what="gpt-oss-20b ($(basename "$model"))" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
. tests/bench/lib.sh
bench_build
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q "$work/old" "$rev"
cmake -S "$work/old" -B "$work/old/b" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$work/old/b" -j"$(nproc)" --target moestream moestream-worker >/dev/null
if [ "$family" = k3 ]; then bench_slice build/moestream "$model"
elif [ ! -f "$model/config.json" ]; then build/moestream synth --preset gpt-oss-20b --out "$model"; fi
ids="100,2000,30000,4000,500,60000,7000,80"
old_id=$(git rev-parse --short "$rev")
new_id=$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo "+changes")
rows=""
all=1
for cfg in "${configs[@]}"; do
  set -- $cfg
  budget=$1 workers=$2
  args=(run --model "$model" --ids "$ids" -n "$ntok" --json --quiet --local-workers "$workers")
  [ "$budget" != unlimited ] && args+=(--ram-budget "$budget")
  "$work/old/b/moestream" "${args[@]}" --dump-logits "$work/old.logits" > "$work/old.json"
  build/moestream "${args[@]}" --dump-logits "$work/new.logits" > "$work/new.json"
  if cmp -s "$work/old.logits" "$work/new.logits"; then same=yes; else same=NO; all=0; fi
  bytes=$(stat -c %s "$work/new.logits")
  # how far apart: the largest difference, rows whose argmax differs, the tokens
  diff=$(python3 - "$work/old.logits" "$work/new.logits" "$work/old.json" "$work/new.json" $((8 + ntok - 1)) <<'PY'
import array, json, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
V = len(b) // int(sys.argv[5]) or None  # rows: the 8 prompt positions and n - 1 generated
tok = json.load(open(sys.argv[3]))["generated_ids"] == json.load(open(sys.argv[4]))["generated_ids"]
if len(a) != len(b):
    print(f"| - | - | {'yes' if tok else 'NO'} |"); sys.exit()
d = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
peak = max((abs(x) for x in a), default=0.0)
print(f"| {d:.3g} (largest logit {peak:.3g}) | {'-' if V is None else sum(1 for r in range(len(a) // V) if max(range(V), key=lambda i: a[r*V+i]) != max(range(V), key=lambda i: b[r*V+i]))} | {'yes' if tok else 'NO'} |")
PY
)
  echo "budget $budget, $workers local workers: $bytes bytes of logits, identical: $same $diff"
  rows+="| $budget | $workers | $bytes | $same $diff"$'\n'
done
{
  echo
  echo "### Same logits across versions: $old_id vs $new_id ($(date -u +%Y-%m-%d))"
  echo
  echo "\`tests/bench/same-logits.sh $rev --family $family\`: $what, prompt of 8 ids,"
  echo "$ntok tokens greedy, \`--dump-logits\` of every computed row compared byte for byte; where they"
  echo "differ, the largest difference of a logit, the rows whose argmax differs, and whether the tokens agree."
  echo
  echo "| budget | local workers | logits bytes | identical | largest difference | argmax rows differing | same tokens |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$rows"
} >> docs/PERFORMANCE.md
[ $all -eq 1 ] || [ $expect_change -eq 1 ] || { echo "same-logits: logits differ" >&2; exit 1; }
