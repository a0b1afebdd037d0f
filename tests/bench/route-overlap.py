#!/usr/bin/env python3
"""How many routed experts consecutive decode tokens share, layer by layer, from a routing trace.

usage: python3 tests/bench/route-overlap.py TRACE --top-k K --experts N

TRACE is what `moestream run --trace PATH` writes (little-endian int32 (layer, expert) pairs in
request order). Each single-token pass asks a layer for exactly K experts, so runs of K requests
of one layer are one decode token's routing there; longer runs (a prompt's rows) are skipped.
Prints, per layer, the experts each token shares with the token before it, their mean, and what
K experts drawn at random from N would share (K * K / N): how much a prediction from the last
token's routing could read ahead of a layer's router."""
import argparse
import struct
import sys

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--top-k", type=int, required=True)
ap.add_argument("--experts", type=int, required=True)
a = ap.parse_args()
raw = open(a.trace, "rb").read()
if len(raw) % 8:
    sys.exit(f"{a.trace}: {len(raw)} bytes is not a whole number of (layer, expert) pairs")
v = struct.unpack(f"<{len(raw) // 4}i", raw)
pairs = list(zip(v[0::2], v[1::2]))
runs, i = [], 0
while i < len(pairs):
    j = i
    while j < len(pairs) and pairs[j][0] == pairs[i][0]:
        j += 1
    if j - i == a.top_k:
        runs.append((pairs[i][0], {e for _, e in pairs[i:j]}))
    i = j
for layer in sorted({l for l, _ in runs}):
    s = [e for l, e in runs if l == layer]
    shared = [len(x & y) for x, y in zip(s, s[1:])]
    mean = sum(shared) / len(shared) if shared else float("nan")
    print(f"layer {layer}: {len(s)} decode tokens, shared with the token before: {shared}, mean {mean:.2f} "
          f"(random: {a.top_k * a.top_k / a.experts:.2f})")
