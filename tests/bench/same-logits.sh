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
rev=${1:?usage: $0 REV [--model DIR] [-n N]}
shift
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
ntok=8
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    *) echo "usage: $0 REV [--model DIR] [-n N]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
bench_build
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q "$work/old" "$rev"
cmake -S "$work/old" -B "$work/old/b" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$work/old/b" -j"$(nproc)" --target moestream moestream-worker >/dev/null
bench_slice build/moestream "$model"
ids="100,2000,30000,4000,500,60000,7000,80"
old_id=$(git rev-parse --short "$rev")
new_id=$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo "+changes")
rows=""
all=1
for cfg in "1G 0" "unlimited 0" "1G 3" "8G 3"; do
  set -- $cfg
  budget=$1 workers=$2
  args=(run --model "$model" --ids "$ids" -n "$ntok" --json --quiet --local-workers "$workers")
  [ "$budget" != unlimited ] && args+=(--ram-budget "$budget")
  "$work/old/b/moestream" "${args[@]}" --dump-logits "$work/old.logits" > "$work/old.json"
  build/moestream "${args[@]}" --dump-logits "$work/new.logits" > "$work/new.json"
  if cmp -s "$work/old.logits" "$work/new.logits"; then same=yes; else same=NO; all=0; fi
  bytes=$(stat -c %s "$work/new.logits")
  echo "budget $budget, $workers local workers: $bytes bytes of logits, identical: $same"
  rows+="| $budget | $workers | $bytes | $same |"$'\n'
done
{
  echo
  echo "### Same logits across versions: $old_id vs $new_id ($(date -u +%Y-%m-%d))"
  echo
  echo "\`tests/bench/same-logits.sh $rev\`: k3-slice (3 layers, real widths), prompt of 8 ids,"
  echo "$ntok tokens greedy, \`--dump-logits\` of every computed row compared byte for byte."
  echo
  echo "| budget | local workers | logits bytes | identical |"
  echo "|---|---|---|---|"
  printf '%s' "$rows"
} >> docs/PERFORMANCE.md
[ $all -eq 1 ] || { echo "same-logits: logits differ" >&2; exit 1; }
