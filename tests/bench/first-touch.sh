#!/usr/bin/env bash
# first-touch: the cost of a weight buffer from allocation to its first use, by how it is faulted
# in (tests/bench/first-touch.c: small or huge pages, populated or not, touched from user space or
# not), 1 GiB read from FILE with O_DIRECT and buffered, each mode ROUNDS times; prints the lines.
# usage: tests/bench/first-touch.sh FILE [ROUNDS] (FILE of at least 1 GiB: a model shard)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 FILE [ROUNDS]" >&2; exit 2; }
file=$1 rounds=${2:-2}
exe=$(mktemp)
trap 'rm -f "$exe"' EXIT
cc -O2 -std=c11 -Wall -Wextra -o "$exe" tests/bench/first-touch.c
for k in $(seq 1 "$rounds"); do
  for io in direct buffered; do
    for mode in 0 1 2 3 4 5; do
      if [ "$io" = direct ]; then "$exe" "$file" "$mode" direct; else head -c 1100000000 "$file" > /dev/null; "$exe" "$file" "$mode"; fi
    done
  done
done
