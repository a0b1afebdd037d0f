#!/usr/bin/env bash
# Kernels of two builds side by side: `moestream bench --json` of each binary in turn, ROUNDS
# times, and for each kernel, shape and T the best GFLOP/s each binary showed. On a shared host
# the machine's speed drifts from minute to minute, so a before / after only means something when
# the two ran alternately like this; the ratio column is NEW / OLD. Prints a Markdown table (for
# docs/PERFORMANCE.md); writes nothing.
#
# usage: tests/bench/kernels-ab.sh OLD_BINARY NEW_BINARY [--threads N] [--rows LIST]
#                                  [--rounds N] [--seconds S] [--path NAME]
set -euo pipefail
usage="usage: $0 OLD_BINARY NEW_BINARY [--threads N] [--rows LIST] [--rounds N] [--seconds S] [--path NAME]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
old=$1 new=$2
shift 2
threads=$(nproc) rows=1 rounds=3 seconds=0.3 path=
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --path) path=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
for b in "$old" "$new"; do [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(bench --threads "$threads" --rows "$rows" --seconds "$seconds" --json)
[ -n "$path" ] && args+=(--path "$path")
for r in $(seq "$rounds"); do
  "$old" "${args[@]}" > "$out/old.$r.json"
  "$new" "${args[@]}" > "$out/new.$r.json"
done
python3 - "$out" "$rounds" "$threads" "$old" "$new" <<'PY'
import json, sys
out, rounds, threads, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
best = {}
order = []
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        for k in json.load(open(f"{out}/{side}.{r}.json"))["kernels"]:
            key = (k["kernel"], k["shape"], k["T"])
            if key not in best:
                best[key] = {}
                order.append(key)
            best[key][side] = max(best[key].get(side, 0.0), k["gflops"])
print(f"{threads} thread(s), {rounds} rounds, best GFLOP/s of each; old: `{old}`, new: `{new}`\n")
print("| kernel | shape | T | old | new | new / old |")
print("|---|---|---|---|---|---|")
for key in order:
    o, n = best[key].get("old", 0.0), best[key].get("new", 0.0)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {o:.1f} | {n:.1f} | {n / o if o else 0:.2f}x |")
PY
