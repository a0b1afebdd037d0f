#!/usr/bin/env bash
# Tokenizer load: wall time and peak RSS of `moestream tokenize` on a tokenizer.json, the first
# time (the JSON parsed and checked, its compiled form cached) and then from the cache, taking
# turns over several rounds, each round with a fresh cache directory. Not part of ctest (timed).
#
# usage: tests/bench/tok-load.sh [--tokenizer DIR] [--rounds N] [--old BIN]
# The tokenizer defaults to the shared o200k_harmony (gpt-oss's tokenizer.json, 27.9 MB).
# --old BIN also times another build's moestream (it has no cache: every load parses).
set -euo pipefail
cd "$(dirname "$0")/../.."
tok=${MS_SHARED_DIR:-../shared}/fixtures/tokenizer/o200k-harmony
rounds=5
old=""
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) tok=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    *) echo "usage: $0 [--tokenizer DIR] [--rounds N] [--old BIN]" >&2; exit 2 ;;
  esac
done
[ -f "$tok/tokenizer.json" ] || { echo "tok-load: no tokenizer.json in $tok" >&2; exit 2; }
cmake -S . -B build >/dev/null
cmake --build build -j2 --target moestream >/dev/null
bin=$PWD/build/moestream
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() { # label binary
  /usr/bin/time -f "%e %M" -o "$tmp/t" "$2" tokenize --tokenizer "$tok" --text "Hello, world" >/dev/null
  read -r s kb < "$tmp/t"
  printf '| %s | %d | %s | %d |\n' "$1" "$r" "$s" "$((kb / 1024))"
}
echo "tokenizer: $tok ($(stat -c %s "$tok/tokenizer.json") bytes); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| load | round | s | peak RSS MiB |"
echo "|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  export MS_CACHE_DIR=$tmp/cache-$r
  [ -n "$old" ] && one "previous build ($old)" "$old"
  one "first (parsed, cached)" "$bin"
  one "again (from the cache)" "$bin"
done
