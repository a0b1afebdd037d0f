#!/usr/bin/env bash
# Serve benchmark: `moestream serve` on the real-width Kimi K3 slice at budgets 1 GiB and 8 GiB;
# 1, 4, 8 and 16 clients stream completions (8-token prompts, --max-tokens tokens, greedy) all at
# once, then the same requests one after another (tests/bench/serve-client.mjs records when each
# token arrives). Reports aggregate tokens/s, p50/p99 time to first token and between tokens,
# the mean batch step time (from /metrics), and checks that concurrent and sequential requests got
# the same token ids. Writes docs/PERFORMANCE.md (section "Serve: concurrent HTTP clients").
# Targets (issue 9): at 1 GiB, 8 concurrent clients >= 3x the aggregate tokens/s of 8 sequential;
# p99 time between tokens < 2x the batch step time.
#
# usage: tests/bench/serve.sh [--model DIR] [--budgets "1G 8G"] [--clients "1 4 8 16"]
#                             [--max-tokens N] [--no-build] [--no-drop] [--doc FILE]
# Root drops the page cache before each budget (not with --no-drop or as another user: said so).
# Try it on a small checkpoint first, e.g.:
#   moestream synth --preset tiny --out /tmp/tiny
#   tests/bench/serve.sh --model /tmp/tiny --budgets 1G --max-tokens 16 --no-build --no-drop --doc /tmp/perf.md
# Needs node (deploy/install-deps.sh installs it) and the slice (written once, ~41 GB).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G 8G"
clients="1 4 8 16"
max_tokens=8
build=1
dropc=1
doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --no-drop) dropc=0; shift ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [--clients LIST] [--max-tokens N] [--no-build] [--no-drop] [--doc FILE]" >&2; exit 2 ;;
  esac
done
. tests/bench/lib.sh
[ $build = 1 ] && bench_build
bin=$root/build/moestream
command -v node >/dev/null || { echo "serve bench: node is needed (deploy/install-deps.sh)" >&2; exit 2; }
out=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
bench_slice "$bin" "$model"
maxc=0
for c in $clients; do [ "$c" -gt "$maxc" ] && maxc=$c; done
head -c 24 /dev/urandom | base64 > "$out/key"

# Requests: c 8-token prompts (ids spread over the vocabulary), greedy.
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")
for c in $clients; do
  python3 - "$c" "$max_tokens" "$vocab" > "$out/reqs-$c.json" <<'PY'
import json, sys
c, mt, V = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print(json.dumps([{"model": "m", "prompt": [(j * 7919 + t * 104729 + 17) % (V - 1) for t in range(8)], "max_tokens": mt}
                  for j in range(c)]))
PY
done

python3 - "$max_tokens" "$vocab" > "$out/warm.json" <<'PY'
import json, sys
mt, V = int(sys.argv[1]), int(sys.argv[2])
print(json.dumps([{"model": "m", "prompt": [(99 * 7919 + t * 104729 + 17) % (V - 1) for t in range(8)], "max_tokens": mt}]))
PY

metric() { curl -s -H "Authorization: Bearer $(cat "$out/key")" "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

echo "load before: $(uptime)" | tee "$out/load-before.txt"
for b in $budgets; do
  if [ "$(id -u)" -eq 0 ] && [ $dropc = 1 ]; then drop; fi
  # As root, serve runs in a memory cgroup whose limit is the budget (page cache included), as
  # the jobs benchmark does; its peak goes to the report.
  cg=
  [ "$(id -u)" -eq 0 ] && cg="bash tests/cgroup-run.sh $(to_bytes "$b") $out/cgroup-$b.txt"
  $cg "$bin" serve --model "$model" --listen 127.0.0.1:0 --ram-budget "$b" --max-batch "$maxc" --max-queue 64 \
    --max-context $((8 + max_tokens + 8)) --api-key-file "$out/key" 2> "$out/serve-$b.log" &
  wrap=$!
  srv=$wrap
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'listening on http://[^ ]*' "$out/serve-$b.log" | head -1 | cut -d' ' -f3) || true
    [ -n "$url" ] && break
    kill -0 $srv 2>/dev/null || { echo "serve bench: serve failed at $b:" >&2; tail -5 "$out/serve-$b.log" >&2; exit 1; }
    sleep 1
  done
  if [ -n "$cg" ]; then srv=$(pgrep -P "$wrap" | head -1); fi # serve itself, under the wrapper
  # One request first, not measured: the first one after the start also warms the caches.
  node tests/bench/serve-client.mjs "$url" "$(cat "$out/key")" "$out/warm.json" sequential > /dev/null
  for c in $clients; do
    for mode in concurrent sequential; do
      s0=$(metric "$url" moestream_steps_total)
      node tests/bench/serve-client.mjs "$url" "$(cat "$out/key")" "$out/reqs-$c.json" $mode > "$out/res-$b-$c-$mode.json"
      s1=$(metric "$url" moestream_steps_total)
      echo "$s0 $s1" > "$out/steps-$b-$c-$mode.txt"
      echo "serve bench: $b, $c clients, $mode: done" >&2
    done
  done
  kill -TERM "$srv"
  wait "$wrap" || true
  srv=
done
echo "load after: $(uptime)" | tee "$out/load-after.txt"

dropped=0
if [ "$(id -u)" -eq 0 ] && [ $dropc = 1 ]; then dropped=1; fi
python3 - "$out" "$model" "$budgets" "$clients" "$max_tokens" "$doc" "$dropped" <<'PY'
import json, os, subprocess, sys, datetime
out, model, budgets, clients, mt, doc, dropped = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5]), sys.argv[6], sys.argv[7]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def pct(v, p):
    if not v: return float('nan')
    v = sorted(v); k = (len(v) - 1) * p / 100; i = int(k)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (k - i)
def stats(path, steps):
    r = json.load(open(path))
    reqs = r["requests"]
    toks = sum(len(q["ids"]) for q in reqs)
    ttft = [q["tokens"][0][0] - q["sent"] for q in reqs if q["tokens"]]
    gaps = []
    for q in reqs:
        t = [x[0] for x in q["tokens"]]
        gaps += [b - a for a, b in zip(t, t[1:])]
    s0, s1 = (float(x) for x in open(steps).read().split())
    ok = all(q["status"] == 200 and q["finish"] for q in reqs)
    return dict(tps=toks / r["wall"], wall=r["wall"], toks=toks, ttft50=pct(ttft, 50), ttft99=pct(ttft, 99),
                gap50=pct(gaps, 50), gap99=pct(gaps, 99), steps=s1 - s0, ids=[q["ids"] for q in reqs], ok=ok)
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/Mem:/{print $2}'")
loads = [open(f"{out}/load-{w}.txt").read().strip().split("load average:")[-1].strip() for w in ("before", "after")]
L = ["## Serve: concurrent HTTP clients\n"]
L.append(f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB RAM; model: `{os.path.basename(model.rstrip('/'))}` "
         f"(the k3-slice is `moestream synth --preset k3-slice --layers 3`). `moestream serve --max-batch {max(map(int, clients))}`; each "
         f"client streams one completion (8-token prompt, {mt} tokens, greedy) through `tests/bench/serve-client.mjs`, "
         f"after one unmeasured warm-up request; "
         f"*concurrent*: all clients at once, *sequential*: the same requests one after another. "
         f"{'Page cache dropped before each budget.' if dropped == '1' else 'Page cache NOT dropped.'} "
         f"Load average (1, 5, 15 min) before {loads[0]}, after {loads[1]}.\n")
cgs = []
for b in budgets:
    try:
        cg = dict(x.split("=") for x in open(f"{out}/cgroup-{b}.txt").read().split())
        cgs.append(f"{b}: peak {int(cg['peak']) / 2**30:.2f} GiB, {cg['oom_kills']} OOM kills")
    except Exception:
        cgs.append(f"{b}: no memory cgroup")
L.append("Memory cgroup of the budget (page cache included): " + "; ".join(cgs) + ".\n")
L.append("Command: `sudo MS_BENCH_DIR=/work/bench bash tests/bench/serve.sh`\n")
L.append("| budget | clients | mode | tokens/s (aggregate) | x sequential | TTFT p50 / p99 (s) | between tokens p50 / p99 (s) | steps | mean step (s) | p99 gap / step | ids = sequential |")
L.append("|---|---|---|---|---|---|---|---|---|---|---|")
verdict = []
for b in budgets:
    for c in clients:
        try:
            s = {m: stats(f"{out}/res-{b}-{c}-{m}.json", f"{out}/steps-{b}-{c}-{m}.txt") for m in ("concurrent", "sequential")}
        except Exception as e:
            L.append(f"| {b} | {c} | failed ({e}) | | | | | | | | |"); continue
        for m in ("concurrent", "sequential"):
            x = s[m]
            step = x["wall"] / x["steps"] if x["steps"] else float('nan')
            same = "yes" if s["concurrent"]["ids"] == s["sequential"]["ids"] else "NO"
            L.append(f"| {b} | {c} | {m}{'' if x['ok'] else ' (errors)'} | {x['tps']:.3f} | "
                     f"{x['tps'] / s['sequential']['tps']:.2f} | {x['ttft50']:.2f} / {x['ttft99']:.2f} | "
                     f"{x['gap50']:.2f} / {x['gap99']:.2f} | {x['steps']:.0f} | {step:.2f} | {x['gap99'] / step:.2f} | "
                     f"{same if m == 'concurrent' else ''} |")
        if c == "8":
            x = s["concurrent"]
            ratio = x["tps"] / s["sequential"]["tps"]
            step = x["wall"] / x["steps"] if x["steps"] else float('nan')
            target = f"target >= 3x: {'met' if ratio >= 3 else 'NOT met'}" if b == "1G" else "the 3x target is for 1G"
            verdict.append(f"{b}: 8 concurrent = {ratio:.2f}x the aggregate tokens/s of 8 sequential ({target}); p99 between tokens {x['gap99']:.2f} s = "
                           f"{x['gap99'] / step:.2f}x the mean step of {step:.2f} s (target < 2x: "
                           f"{'met' if x['gap99'] < 2 * step else 'NOT met'}).")
L.append("")
L += [f"- {v}" for v in verdict]
L.append("")
L.append("Columns: *tokens/s* is every generated token over the wall time of the run (client side, first request "
         "sent to last token received); *TTFT* from sending a request to its first token; *between tokens* the gaps "
         "between successive token events of one request; *steps* the engine steps the run took (/metrics "
         "`moestream_steps_total`), *mean step* the wall time over them; *ids = sequential* compares every request's "
         "token ids between the two modes.\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(doc, "## Serve: concurrent HTTP clients", text)
PY
