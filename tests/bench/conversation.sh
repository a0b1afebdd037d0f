#!/usr/bin/env bash
# conversation.sh: what the prefix cache saves (issue 20, docs/PERFORMANCE.md "Conversations and
# shared prompts"). A 4-turn conversation through `serve` (turns of about 40 tokens, answers of 16;
# each request sends the history, as clients do): time to first token and bytes read per turn
# with --prefix-cache and without; a `jobs` file of 16 jobs sharing a 200-token system prompt:
# wall time and bytes read as jobs runs by default (the shared beginning prefilled once and kept)
# and with --no-shared-prefill. The page cache is dropped before every turn and run,
# and every answer must be the same with the cache as without.
# Default model: the 3-layer k3-slice (about 41 GB of disk, written once) at 1G and 8G. Another
# model and budgets: --model DIR --budgets "LIST" [--synth PRESET] (the section names them).
# Needs root (drop_caches).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
model=/var/tmp/moestream-bench/k3-slice budgets="1G 8G" synth=""
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --synth) synth=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [--synth PRESET]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "conversation bench: needs root (drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_build
bin=$root/build/moestream
if [ -n "$synth" ]; then
  [ -f "$model/config.json" ] || { mkdir -p "$(dirname "$model")"; "$bin" synth --preset "$synth" --out "$model"; }
else
  bench_slice "$bin" "$model"
fi
out=$(mktemp -d)
python3 tests/bench/conversation.py "$bin" "$model" "$out" $budgets
python3 - "$out" "$model" "$budgets" <<'PY'
import json, sys
sys.path.insert(0, "tests/bench")
from docsection import put_section
out, model, budgets = sys.argv[1], sys.argv[2], sys.argv[3].split()
r = json.load(open(out + "/results.json"))
L = ["## Conversations and shared prompts (prefix cache)", "",
     "`tests/bench/conversation.sh --model %s --budgets \"%s\"` on %s (%s). The page cache is dropped before every "
     "turn and run; `serve` and `jobs` at `--ram-budget B`, with `--prefix-cache` (an eighth of the budget, at most 256 MiB) or without. A conversation of "
     "4 turns (about 40 new tokens a turn, answers of 16 tokens, each request carrying the history); 16 jobs sharing a "
     "%d-token system prompt." % (model, " ".join(budgets), r["machine"], r["model"], r["system_tokens"]), ""]
L.append("| budget | turn | prompt tokens | TTFT without | TTFT with | x | GB read without | GB read with | same answer |")
L.append("|---|---|---|---|---|---|---|---|---|")
for b in budgets:
    for t in r["turns"][b]:
        L.append("| %s | %d | %d | %.2f s | %.2f s | %.1fx | %.3f | %.3f | %s |" % (
            b, t["turn"], t["prompt_tokens"], t["ttft_off"], t["ttft_on"], t["ttft_off"] / max(t["ttft_on"], 1e-9),
            t["gb_off"], t["gb_on"], "yes" if t["same"] else "NO"))
L += ["", "Jobs: *with* is `jobs` as it runs by default (the shared beginning prefilled once, its state kept in room the plan "
      "reserves for it), *without* is `jobs --no-shared-prefill` (every job prefills its whole prompt).", "",
      "| budget | jobs | wall without | wall with | x | GB read without | GB read with | same results |", "|---|---|---|---|---|---|---|---|"]
for b in budgets:
    j = r["jobs"][b]
    L.append("| %s | 16 | %.1f s | %.1f s | %.2fx | %.3f | %.3f | %s |" % (b, j["wall_off"], j["wall_on"],
             j["wall_off"] / max(j["wall_on"], 1e-9), j["gb_off"], j["gb_on"], "yes" if j["same"] else "NO"))
L += ["", "Targets (issue 20): turn 4's time to first token at least 3x lower with the cache at the smallest budget; the "
      "shared-prompt jobs at least 2x faster there; the same outputs.", ""]
put_section("docs/PERFORMANCE.md", "## Conversations and shared prompts", "\n".join(L))
print("\n".join(L))
PY
rm -rf "$out"
