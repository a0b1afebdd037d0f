#!/usr/bin/env bash
# vs-llama: moestream beside llama.cpp on the same gpt-oss weights and machine: decode and
# prefill tokens/s of both engines, alternating runs, with no limit (warm page cache) and inside
# memory cgroups of 8 and 4 GiB (page cache dropped); llama.cpp as npm's node-llama-cpp ships
# it, through ../shared/tools/llamacpp (the GGUF converter, the runner, the no-repack shim).
# Under a limit llama.cpp gets its best option that runs: its default load, else without
# repacking. Beside each moestream row: the bytes it read from disk per decode token against
# the model's active bytes per token (trunk + top-k experts of every MoE layer: the bound).
# Writes docs/PERFORMANCE.md section "Beside llama.cpp: CPU, PATH" (one per machine kind) and prints it.
#
# usage: tests/bench/vs-llama.sh [--bin BINARY] [--model DIR] [--gguf FILE] [--lengths "64 512"]
#          [-n 32] [--budgets "unlimited 8G 4G"] [--runs 2] [--llama-dir DIR] [--doc FILE]
# Needs root (cgroups, drop_caches), node and npm (node-llama-cpp 3.22.1 is installed into
# --llama-dir when missing; exit 77 with a message when npm cannot reach its registry), numpy
# for the converter (python3-numpy), and ~30 GB of disk for the checkpoint and its GGUF.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
base=${MS_BENCH_DIR:-$root/build-bench}
model=$base/gpt-oss-20b gguf= lengths="64 512" n=32 budgets="unlimited 8G 4G" runs=2 bin=
llama_dir=$base/llama doc=docs/PERFORMANCE.md
tools=$root/../shared/tools/llamacpp
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --gguf) gguf=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --llama-dir) llama_dir=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--model DIR] [--gguf FILE] [--lengths LIST] [-n N] [--budgets LIST] [--runs N] [--llama-dir DIR] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "vs-llama: needs root (cgroups, drop_caches)" >&2; exit 2; }
[ -f "$tools/bench_llama.mjs" ] || { echo "vs-llama: skipped: $tools (../shared/tools/llamacpp) is absent" >&2; exit 77; }
command -v npm >/dev/null || { echo "vs-llama: skipped: npm is not installed" >&2; exit 77; }
. tests/bench/lib.sh
bench_bin_out
gguf=${gguf:-$model.gguf}

# llama.cpp from npm, once.
mkdir -p "$llama_dir"
if [ ! -d "$llama_dir/node_modules/node-llama-cpp" ]; then
  (cd "$llama_dir" && { [ -f package.json ] || npm init -y >/dev/null; } &&
   timeout 900 npm install --no-audit --no-fund node-llama-cpp@3.22.1 >/dev/null 2>"$out/npm.txt") ||
    { echo "vs-llama: skipped: npm could not install node-llama-cpp (registry not reachable?):" >&2
      tail -3 "$out/npm.txt" >&2; exit 77; }
fi
cp "$tools/bench_llama.mjs" "$llama_dir/"
# the CPU build's library (libllama.vX.Y.Z.so), which the no-repack shim hooks
libllama=$(find "$llama_dir/node_modules/@node-llama-cpp/linux-x64/bins" -name 'libllama.v*.so' | head -1)
[ -n "$libllama" ] || { echo "vs-llama: no libllama.v*.so under $llama_dir/node_modules/@node-llama-cpp/linux-x64/bins" >&2; exit 1; }
gcc -shared -fPIC -o "$out/norepack.so" "$tools/norepack.c" -ldl

# The checkpoint and its GGUF, once.
[ -f "$model/config.json" ] || { mkdir -p "$(dirname "$model")"; "$bin" synth --preset gpt-oss-20b --out "$model"; }
if [ ! -f "$gguf" ]; then
  /usr/bin/python3 -c "import numpy" 2>/dev/null || apt-get install -y -qq python3-numpy >/dev/null
  /usr/bin/python3 "$tools/convert_oss_gguf.py" "$model" "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
fi
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")

# One run of engine $1 (ms | llama) at budget $2 on prompt length $3, run $4; llama's option
# $5 (default | norepack). Files: run-R.json, err-R.txt, cgroup-R.txt, uptime-R.txt.
one() {
  local eng=$1 b=$2 len=$3 k=$4 opt=${5:-default}
  local r=$eng-$b-$len-$k-$opt cmd=()
  if [ "$eng" = ms ]; then
    cmd=("$bin" run --model "$model" --ids-file "$out/ids-$len.txt" -n "$n" --temperature 0 --json --quiet)
    [ "$b" = unlimited ] || cmd+=(--ram-budget "$b")
  else
    cmd=(node "$llama_dir/bench_llama.mjs" --model "$gguf" --ids-file "$out/ids-$len.txt" -n "$n" --threads "$(nproc)"
         --ctx $(( (len + n + 255) / 256 * 256 )))
  fi
  [ "$b" = unlimited ] || drop
  uptime > "$out/uptime-$r.txt"
  set +e
  if [ "$b" = unlimited ]; then
    echo "limit=none peak=0 oom_kills=0" > "$out/cgroup-$r.txt"
    if [ "$opt" = norepack ]; then LD_PRELOAD=$out/norepack.so LLAMA_SO=$libllama "${cmd[@]}"; else "${cmd[@]}"; fi \
      > "$out/run-$r.json" 2> "$out/err-$r.txt"
  elif [ "$opt" = norepack ]; then
    LD_PRELOAD=$out/norepack.so LLAMA_SO=$libllama bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$r.txt" \
      "${cmd[@]}" > "$out/run-$r.json" 2> "$out/err-$r.txt"
  else
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$r.txt" "${cmd[@]}" > "$out/run-$r.json" 2> "$out/err-$r.txt"
  fi
  local rc=$?
  set -e
  echo "vs-llama: $r: status $rc" >&2
  return $rc
}

for len in $lengths; do
  python3 -c "
import random
r = random.Random($len)
print(','.join(str(r.randrange(1, $vocab)) for _ in range($len)))" > "$out/ids-$len.txt"
done
for b in $budgets; do
  lopt=default # llama.cpp's best option that runs at this budget
  for len in $lengths; do
    for k in $(seq 1 "$runs"); do # alternating, so drift on a shared machine hits both alike
      one ms "$b" "$len" "$k" || true
      if ! one llama "$b" "$len" "$k" "$lopt" && [ "$lopt" = default ] && [ "$b" != unlimited ]; then
        lopt=norepack
        one llama "$b" "$len" "$k" norepack || true
      fi
    done
  done
done

python3 - "$out" "$model" "$gguf" "$lengths" "$budgets" "$runs" "$n" "$doc" <<'PY'
import json, os, struct, subprocess, sys, datetime
out, model, gguf, lengths, budgets, runs, n, path = sys.argv[1:9]
lengths, budgets, runs = lengths.split(), budgets.split(), int(runs)
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
# the kernel path moestream dispatches to here: sections of different machines stay apart
flags = open("/proc/cpuinfo").read()
path_name = "AVX-512" if " avx512f" in flags and " avx512bw" in flags else ("AVX2" if " avx2" in flags else "scalar")
heading = f"## Beside llama.cpp: {cpu}, {path_name}"
mem = sh("free -g | awk '/^Mem:/ {print $2}'")
# Active bytes per token from the checkpoint's headers: every tensor but the embedding and the
# routed experts, plus top_k / n_experts of the experts (one embedding row is negligible).
cfg = json.load(open(os.path.join(model, "config.json")))
cfg = cfg.get("text_config") or cfg
top_k, n_exp = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token"), cfg.get("num_local_experts") or cfg.get("num_experts")
size = trunk = experts = 0
for f in sorted(os.listdir(model)):
    if not f.endswith(".safetensors"): continue
    size += os.path.getsize(os.path.join(model, f))
    with open(os.path.join(model, f), "rb") as fh:
        hl = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(hl))
    for name, t in h.items():
        if name == "__metadata__": continue
        nb = t["data_offsets"][1] - t["data_offsets"][0]
        if ".experts." in name: experts += nb
        elif "embed" not in name: trunk += nb
active = trunk + experts * top_k / n_exp
def load(r):
    try: return json.load(open(f"{out}/run-{r}.json"))
    except Exception: return None
def cg(r):
    try: return dict(x.split("=") for x in open(f"{out}/cgroup-{r}.txt").read().split())
    except Exception: return {}
def up(r):
    try: return open(f"{out}/uptime-{r}.txt").read().split("load average:")[-1].split(",")[0].strip()
    except Exception: return "?"
def rng(v, f="{:.2f}"):
    v = [x for x in v if x is not None]
    if not v: return "-"
    return f.format(min(v)) if len(v) == 1 or f.format(min(v)) == f.format(max(v)) else f.format(min(v)) + "-" + f.format(max(v))
lines = [heading + "\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB of RAM; model: "
         f"`{os.path.basename(model.rstrip('/'))}` ({size/1e9:.1f} GB; active bytes per token {active/1e9:.2f} GB: "
         f"trunk without the embedding + {top_k} of {n_exp} experts a layer); llama.cpp from npm's node-llama-cpp "
         f"3.22.1 on a GGUF of the same weights (`../shared/tools/llamacpp/convert_oss_gguf.py`: BF16 trunk, MXFP4 "
         f"experts), both with {os.cpu_count()} threads; prompts of random ids, {n} tokens generated greedily, "
         f"{runs} runs of each engine alternating. *unlimited*: no limit, page cache warm; a budget: a memory "
         f"cgroup of that size (moestream also gets it as `--ram-budget`), page cache dropped before each run. "
         f"llama.cpp's option: its default load (mmap, weights repacked for its kernels), or where that is killed "
         f"`--no-repack` (the shim `norepack.c`). Ranges are over the runs.\n",
         "Command: `sudo bash tests/bench/vs-llama.sh`\n",
         "| memory | prompt | moestream decode tok/s | llama.cpp decode tok/s | decode ms / llama | moestream prefill tok/s | "
         "llama.cpp prefill tok/s | prefill ms / llama | llama.cpp option | moestream disk GB / decode token (active "
         f"{active/1e9:.2f}) | peak GiB ms / llama | tokens: runs agree (ms, llama) | load avg |",
         "|---" * 13 + "|"]
for b in budgets:
    for ln in lengths:
        ms = [load(f"ms-{b}-{ln}-{k}-default") for k in range(1, runs + 1)]
        la, opt = [], "-"
        for o in ("default", "norepack"):
            got = [load(f"llama-{b}-{ln}-{k}-{o}") for k in range(1, runs + 1)]
            if any(got): la, opt = got, o
        killed = [o for o in ("default",) if any(cg(f"llama-{b}-{ln}-{k}-{o}").get("oom_kills", "0") != "0" for k in range(1, runs + 1))]
        if opt == "norepack" and killed: opt = "no-repack (default killed)"
        mss = [j["stats"] for j in ms if j]
        md = [s["decode_tokens_per_second"] for s in mss]
        mp = [s["prefill_tokens_per_second"] for s in mss]
        ld = [j["decode_tokens_per_second"] for j in la if j]
        lp = [j["prefill_tokens_per_second"] for j in la if j]
        rd = [s["decode_bytes_read_per_token"] / 1e9 for s in mss]
        mpk = [s["peak_rss_bytes"] / 2**30 for s in mss]
        lpk = [j["maxrss_bytes"] / 2**30 for j in la if j]
        agree_ms = len({tuple(j["generated_ids"]) for j in ms if j}) <= 1
        agree_la = len({tuple(j["generated_ids"]) for j in la if j}) <= 1
        ratio = lambda a, c: f"{max(a)/max(c):.2f}x" if a and c else "-"
        ups = [up(f"ms-{b}-{ln}-{k}-default") for k in range(1, runs + 1)]
        lines.append(f"| {b} | {ln} | {rng(md)} | {rng(ld) if ld else 'killed'} | {ratio(md, ld)} | {rng(mp, '{:.1f}')} | "
                     f"{rng(lp, '{:.1f}') if lp else 'killed'} | {ratio(mp, lp)} | {opt if la else 'none ran'} | {rng(rd)} | "
                     f"{rng(mpk)} / {rng(lpk)} | {'yes' if agree_ms else 'NO'}, {'yes' if agree_la else 'NO'} | {', '.join(ups)} |")
lines.append("\nRatios compare each engine's best run. The tokens of the two engines differ on these random "
             "weights (llama.cpp rounds activations to BF16 and Q8_0 before its matmuls, which changes expert "
             "choices; moestream keeps float32 and matches the reference within the fixtures' tolerance), so "
             "only each engine's agreement with itself is reported.\n")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, heading, text)
PY
