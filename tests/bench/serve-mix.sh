#!/usr/bin/env bash
# serve-mix: a long prompt arriving while other requests decode. `moestream serve` on the
# k3-slice inside a memory cgroup equal to its --ram-budget (page cache dropped first), the
# previous binary beside this one: D clients stream completions (8-token prompts); once each has
# streamed 3 tokens, one request with an N-token prompt (random ids, seeded) arrives; when its
# first token is in and every decoder has streamed 3 more, the decoders are cancelled
# (tests/bench/serve-mix.mjs records when each token arrived). Reports the long request's time to
# first token and the decoders' time between tokens before it arrived and during its prefill,
# with the bytes read (/metrics). Writes docs/PERFORMANCE.md section "Serve: a long prompt among
# decoding requests" and prints it.
#
# usage: tests/bench/serve-mix.sh --old BINARY [--bin BINARY] [--model DIR] [--budget 8G]
#          [--long 4096] [--decoders 4] [--new-args "ARGS"] [--doc FILE]
#   --new-args ARGS  options for the new binary's serve only (e.g. "--prefill-mixed auto")
# Needs root (cgroups, drop_caches) and node (deploy/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budget=8G long=4096 decoders=4 bin= old= doc=docs/PERFORMANCE.md new_args=
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --long) long=$2; shift 2 ;;
    --decoders) decoders=$2; shift 2 ;;
    --new-args) new_args=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--budget SIZE] [--long N] [--decoders D] [--new-args ARGS] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "serve-mix: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "serve-mix: needs root (cgroups, drop_caches)" >&2; exit 2; }
command -v node >/dev/null || { echo "serve-mix: node is needed (deploy/install-deps.sh)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
srv= wrap=
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
bench_slice "$bin" "$model"
head -c 24 /dev/urandom | base64 > "$out/key"
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")
python3 -c "
import random
r = random.Random($long)
print(','.join(str(r.randrange(1, min($vocab, 160000))) for _ in range($long)))" > "$out/ids.txt"
maxctx=$((long + 64))
metric() { curl -s -H "Authorization: Bearer $(cat "$out/key")" "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

for which in old new; do
  exe=$bin extra=$new_args
  [ $which = old ] && exe=$old extra=
  drop
  uptime > "$out/uptime-$which.txt"
  bash tests/cgroup-run.sh "$(to_bytes "$budget")" "$out/cgroup-$which.txt" "$exe" serve --model "$model" \
    --listen 127.0.0.1:0 --ram-budget "$budget" --max-batch $((decoders + 1)) --max-context $maxctx \
    --trunk-pack none --api-key-file "$out/key" $extra 2> "$out/serve-$which.log" &
  wrap=$!
  srv=$wrap
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'listening on http://[^ ]*' "$out/serve-$which.log" | head -1 | cut -d' ' -f3) || true
    [ -n "$url" ] && break
    kill -0 $wrap 2>/dev/null || { echo "serve-mix: $which serve failed:" >&2; tail -5 "$out/serve-$which.log" >&2; exit 1; }
    sleep 1
  done
  srv=$(pgrep -P "$wrap" | head -1)
  b0=$(metric "$url" moestream_bytes_read_total)
  node tests/bench/serve-mix.mjs "$url" "$(cat "$out/key")" "$decoders" "$out/ids.txt" 3 3 $((maxctx - 16)) "$vocab" > "$out/mix-$which.json"
  b1=$(metric "$url" moestream_bytes_read_total)
  echo "$b0 $b1" > "$out/bytes-$which.txt"
  kill -TERM "$srv"
  wait "$wrap" || true
  srv=
  echo "serve-mix: $which done (load $(cut -d, -f3- < "$out/uptime-$which.txt" | xargs))" >&2
done

python3 - "$out" "$model" "$budget" "$long" "$decoders" "$doc" "$new_args" <<'PY'
import json, os, subprocess, sys, datetime
out, model, budget, long, D, path, new_args = sys.argv[1:8]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def pct(v, p):
    if not v: return float('nan')
    v = sorted(v); k = (len(v) - 1) * p / 100; i = int(k)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (k - i)
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
L = ["## Serve: a long prompt among decoding requests\n",
     f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores; model: `{os.path.basename(model.rstrip('/'))}` "
     f"({size/1e9:.1f} GB; the k3-slice is `moestream synth --preset k3-slice`), `--trunk-pack none`, `serve --ram-budget {budget}` in a memory cgroup of "
     f"{budget}, page cache dropped before each binary. {D} clients stream completions (8-token prompts); once each "
     f"has 3 tokens, one request with a {long}-token prompt (random ids) arrives; when its first token is in and each "
     f"decoder has 3 more, the decoders are cancelled (`tests/bench/serve-mix.mjs`). *old* is the previous binary, "
     f"*new* this one{(' with `' + new_args + '`') if new_args else ''}. *before*: the decoders' gaps between tokens before the long request arrived; *during*: gaps "
     f"that end while its prompt is prefilled (arrival to first token); *read* is what the server read from disk "
     f"over the whole run (/metrics).\n",
     "Command: `sudo bash tests/bench/serve-mix.sh --old OLD_BINARY" + (f' --new-args "{new_args}"' if new_args else "") + "`\n",
     "| binary | long request: time to first token s | decoders' gap before: p50 s | during: p50 / p99 / max s | tokens each during | read GB | cgroup peak GiB | load avg |",
     "|---|---|---|---|---|---|---|---|"]
for which in ("old", "new"):
    up = open(f"{out}/uptime-{which}.txt").read().split("load average:")[-1].split(",")[0].strip()
    try:
        r = json.load(open(f"{out}/mix-{which}.json"))
    except Exception:
        L.append(f"| {which} | failed | | | | | | {up} |")
        continue
    t0, t1 = r["long"]["sent"], r["long"]["first"]
    before, during, ndur = [], [], []
    for d in r["decoders"]:
        t = d["tokens"]
        gaps = list(zip(t, t[1:]))
        before += [b - a for a, b in gaps if b <= t0]
        during += [b - a for a, b in gaps if t0 < b <= t1 or (a < t1 and b > t1)]
        ndur.append(sum(1 for x in t if t0 < x <= t1))
    b0, b1 = (float(x) for x in open(f"{out}/bytes-{which}.txt").read().split())
    cg = dict(x.split("=") for x in open(f"{out}/cgroup-{which}.txt").read().split())
    L.append(f"| {which} | {t1 - t0:.1f} | {pct(before, 50):.2f} | {pct(during, 50):.2f} / {pct(during, 99):.2f} / "
             f"{max(during) if during else float('nan'):.2f} | {min(ndur)}-{max(ndur)} | {(b1 - b0)/1e9:.1f} | "
             f"{int(cg.get('peak', 0))/2**30:.2f} | {up} |")
text = "\n".join(L) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## Serve: a long prompt among decoding requests", text)
PY
