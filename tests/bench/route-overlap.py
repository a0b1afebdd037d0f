#!/usr/bin/env python3
"""How many routed experts consecutive tokens share, layer by layer, from a routing trace.

usage: python3 tests/bench/route-overlap.py TRACE --top-k K --experts N [--last-run] [--window W]

TRACE is what `moestream run --trace PATH` writes, or the reference trace of ../shared/fixtures
(little-endian int32 (layer, expert) pairs in request order; a call over several rows asks for
row 0's K experts, then row 1's, ...). Each layer's requests are split into tokens of K; with
--last-run only each layer's last run of requests is used (for traces whose every pass runs the
whole sequence again, as the reference trace's do). Prints, per layer, the experts each token
shares with the token before and with the union of the W tokens before (default 4), their means
over all layers, and what K experts drawn at random from N would share with one token (K*K/N):
how much a prediction from the last tokens' routing could read ahead of a layer's router."""
import argparse
import struct
import sys

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--top-k", type=int, required=True)
ap.add_argument("--experts", type=int, required=True)
ap.add_argument("--last-run", action="store_true")
ap.add_argument("--window", type=int, default=4)
a = ap.parse_args()
raw = open(a.trace, "rb").read()
if len(raw) % 8:
    sys.exit(f"{a.trace}: {len(raw)} bytes is not a whole number of (layer, expert) pairs")
v = struct.unpack(f"<{len(raw) // 4}i", raw)
pairs = list(zip(v[0::2], v[1::2]))
runs, i = [], 0  # (layer, [experts]) for each run of consecutive requests of one layer
while i < len(pairs):
    j = i
    while j < len(pairs) and pairs[j][0] == pairs[i][0]:
        j += 1
    if (j - i) % a.top_k:
        sys.exit(f"{a.trace}: a run of {j - i} requests of layer {pairs[i][0]} is not whole tokens of {a.top_k}")
    runs.append((pairs[i][0], [e for _, e in pairs[i:j]]))
    i = j
tokens = {}
for layer, es in runs:
    if a.last_run:
        tokens[layer] = []
    tokens.setdefault(layer, []).extend(set(es[t:t + a.top_k]) for t in range(0, len(es), a.top_k))
prev_all, win_all = [], []
for layer in sorted(tokens):
    s = tokens[layer]
    prev = [len(x & y) for x, y in zip(s, s[1:])]
    win = [len(s[t] & set().union(*s[t - a.window:t])) for t in range(a.window, len(s))]
    prev_all += prev
    win_all += win
    mean = lambda x: sum(x) / len(x) if x else float("nan")
    print(f"layer {layer}: {len(s)} tokens, shared with the token before: mean {mean(prev):.2f} {prev}; "
          f"with the {a.window} before: mean {mean(win):.2f}")
mean = lambda x: sum(x) / len(x) if x else float("nan")
print(f"all layers: shared with the token before {mean(prev_all):.2f} of {a.top_k}, with the {a.window} before "
      f"{mean(win_all):.2f}; random: {a.top_k * a.top_k / a.experts:.2f} with one token")
