#!/usr/bin/env bash
# Tokenizer on long words: time and peak RSS of `moestream tokenize` on one word of 1, 2, 4 and
# 8 MiB (and 16 with --big) of several kinds, to see that the cost grows (close to) linearly
# with the length: split regex O(n), byte-pair merge O(n log n). Not part of ctest (timed).
#
# usage: tests/bench/tok-long-word.sh [--tokenizer DIR] [--big]
# The tokenizer defaults to the shared o200k surrogate (/work/shared or MS_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
tok=${MS_SHARED_DIR:-/work/shared}/fixtures/tokenizer/kimi-o200k
sizes="1 2 4 8"
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) tok=$2; shift 2 ;;
    --big) sizes="1 2 4 8 16"; shift ;;
    *) echo "usage: $0 [--tokenizer DIR] [--big]" >&2; exit 2 ;;
  esac
done
[ -f "$tok/tiktoken.model" ] || { echo "tok-long-word: no tokenizer in $tok" >&2; exit 2; }
cmake -S . -B build >/dev/null
cmake --build build -j2 >/dev/null
bin=$PWD/build/moestream
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# kind -> one python expression giving the word's text for n bytes
declare -A gen=(
  [lowercase]="''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(n))"
  [one-letter]="'a' * n"
  [uppercase]="''.join(random.choice('ABCDEFGHIJKLMNOPQRSTUVWXYZ') for _ in range(n))"
  [thai]="''.join(chr(0x0e01 + random.randrange(46)) for _ in range(n // 3))"
  [han]="''.join(chr(0x4e00 + random.randrange(512)) for _ in range(n // 3))"
  [spaces]="' ' * n"
)
printf '%-11s %6s %9s %9s %10s\n' kind MiB seconds MiB/s "peak RSS"
for kind in lowercase one-letter uppercase thai han spaces; do
  for mib in $sizes; do
    f=$tmp/$kind-$mib.txt
    python3 -c "import random, sys; random.seed(1); n = $mib << 20; sys.stdout.write(${gen[$kind]})" >"$f"
    out=$( { /usr/bin/time -f '%e %M' "$bin" tokenize --tokenizer "$tok" --file "$f" >/dev/null; } 2>&1 | tail -1)
    read -r secs rss <<<"$out"
    printf '%-11s %6s %9s %9.1f %7d MiB\n' "$kind" "$mib" "$secs" "$(echo "$mib / ($secs + 0.001)" | bc -l)" \
      $((rss / 1024))
    rm -f "$f"
  done
done
