#!/bin/bash
# A/B of two binaries on an in-memory span (the attention and matmul tiles, c460d64 / 21fb6a1):
# the small preset, 2,048 random ids in one span (--prefill-span 2048), warm page cache, three
# alternating rounds; prints wall and user seconds, the prefill's, and the tokens.
# usage: tests/bench/tiles-ab.sh OLD_BINARY NEW_BINARY SMALL_MODEL_DIR
set -u
old=$1 new=$2 model=$3
cd "$(mktemp -d)"
python3 -c "
import random
r = random.Random(2048)
print(','.join(str(r.randrange(1, 4000)) for _ in range(2048)))" > ids-small-2048.txt
for b in "$old" "$new"; do $b run --model "$model" --ids-file ids-small-2048.txt -n 2 --prefill-span 2048 --json --quiet > /dev/null; done
for round in 1 2 3; do
  for b in "$old" "$new"; do
    /usr/bin/time -f "%e s wall %U s user" $b run --model "$model" --ids-file ids-small-2048.txt -n 2 --prefill-span 2048 --json --quiet > ab.json 2> ab.err
    echo "$b $(tail -1 ab.err) $(python3 -c "import json;j=json.load(open('ab.json'));s=j.get('stats',{});print('prefill_s', s.get('prefill_seconds'), 'cpu_user_prefill', s.get('cpu_user_seconds_prefill'), 'tokens', j.get('generated_ids'))")"
  done
done
