#!/usr/bin/env bash
# gpt-oss memory and speed: the real-width 20b (random weights, real bytes: `synth --preset
# gpt-oss-20b`) at several RAM budgets, each run inside a memory cgroup equal to its budget with
# the page cache dropped first, logits compared bit for bit across budgets; then the 120b layout
# (`--preset gpt-oss-120b --sparse`: real headers, every weight a hole) planned and generating at
# --ram-budget 8G inside an 8 GiB cgroup, and its decode time projected to a 3 GB/s and a 7 GB/s
# NVMe from the bytes it read and the CPU it used per token. The disk is measured with fio.
# Writes docs/PERFORMANCE.md (section "gpt-oss memory ladder") and prints it.
#
# usage: tests/bench/gpt-oss.sh [--dir DIR] [--budgets "2G 4G 8G unlimited"] [-n N] [--bin BINARY]
# Needs root (cgroups, drop_caches), ~14 GB of disk for the 20b (written once), and fio.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=${MS_BENCH_DIR:-$root/build-bench}
budgets="2G 4G 8G unlimited"
n=8
bin=
doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--dir DIR] [--budgets LIST] [-n N] [--bin BINARY] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "gpt-oss bench: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_need_fio
if [ -z "$bin" ]; then
  bench_build
  bin=$root/build/moestream
fi
m20=$dir/gpt-oss-20b m120=$dir/gpt-oss-120b-sparse
[ -f "$m20/config.json" ] || { mkdir -p "$dir"; "$bin" synth --preset gpt-oss-20b --out "$m20"; }
[ -f "$m120/config.json" ] || "$bin" synth --preset gpt-oss-120b --sparse --out "$m120"
out=$(mktemp -d)
ids="200006,1428,200008,12194,3375,382,290,4378,30,200007,200006,173781"

shard=$(ls -S "$m20"/*.safetensors | head -n 1)
drop
fio --name=go --filename="$shard" --readonly --direct=1 --rw=randread --bs=16M --iodepth=8 --ioengine=libaio \
    --runtime=20 --time_based --output-format=json > "$out/fio.json" 2>/dev/null

run_at() { # MODEL BUDGET TAG
  local model=$1 b=$2 r=$3
  drop
  uptime > "$out/uptime-$r.txt"
  local args=(run --model "$model" --ids "$ids" -n "$n" --temperature 0 --json --quiet --dump-logits "$out/logits-$r.bin")
  set +e
  if [ "$b" = unlimited ]; then
    "$bin" "${args[@]}" > "$out/run-$r.json"
    rc=$?
    echo "limit=none peak=0 oom_kills=0" > "$out/cgroup-$r.txt"
  else
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$r.txt" "$bin" "${args[@]}" --ram-budget "$b" > "$out/run-$r.json"
    rc=$?
  fi
  set -e
  [ $rc -eq 0 ] || echo "gpt-oss bench: $r failed with status $rc" >&2
  echo "gpt-oss bench: $r done" >&2
}
for b in $budgets; do run_at "$m20" "$b" "20b-$b"; done
run_at "$m120" 8G 120b-8G

python3 - "$out" "$m20" "$budgets" "$doc" "$n" <<'PY'
import json, os, subprocess, sys, datetime
out, m20, budgets, path, n = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
fio = json.load(open(f"{out}/fio.json"))["jobs"][0]["read"]["bw_bytes"]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu, mem = sh("lscpu | sed -n 's/^Model name: *//p'"), sh("free -g | awk '/Mem:/{print $2}'")
size = sum(os.path.getsize(os.path.join(m20, f)) for f in os.listdir(m20) if f.endswith(".safetensors"))
G = 2**30
def peak(cg): return "none" if cg.get("limit") == "none" else f"{int(cg.get('peak', '0'))/G:.2f} GiB"
def load(r):
    try: j = json.load(open(f"{out}/run-{r}.json"))
    except Exception: return None, None, None
    cg = dict(x.split("=") for x in open(f"{out}/cgroup-{r}.txt").read().split())
    return j, cg, open(f"{out}/logits-{r}.bin", "rb").read()
lines = ["## gpt-oss memory ladder\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB RAM. Model: `moestream synth "
         f"--preset gpt-oss-20b` ({size/1e9:.1f} GB: the released 20b config and layout, 24 layers, 32 MXFP4 experts "
         f"of 13,236,480 bytes per layer, random weights). Prompt of 12 tokens, then {n} generated greedily. Each run: "
         f"page cache dropped, then inside a memory cgroup whose limit equals `--ram-budget` (none for 'unlimited'). "
         f"Disk: fio O_DIRECT random 16 MiB reads, queue depth 8: **{fio/1e9:.2f} GB/s**.\n",
         "Command: `sudo bash tests/bench/gpt-oss.sh`\n",
         "| budget | decode s/token | peak RSS | cgroup peak | OOM kills | trunk pinned | expert cache | GB read / decode token | decode CPU s / token | logits = unlimited's |",
         "|---" * 10 + "|"]
ref = load("20b-unlimited")[2] if "unlimited" in budgets else None
unl = None
for b in budgets:
    j, cg, lg = load(f"20b-{b}")
    if j is None:
        lines.append(f"| {b} | failed |" + " |" * 8); continue
    s = j["stats"]; p = s.get("plan", {})
    if b == "unlimited": unl = s["decode_seconds_per_token"]
    lines.append(f"| {b} | {s['decode_seconds_per_token']:.2f} | {s['peak_rss_bytes']/G:.2f} GiB | {peak(cg)} | "
                 f"{cg.get('oom_kills','?')} | {p.get('trunk_pinned_bytes',0)/G:.2f} GiB | {p.get('expert_cache_bytes',0)/G:.2f} GiB | "
                 f"{s['decode_bytes_read_per_token']/1e9:.2f} | {s['decode_cpu_seconds_per_token']:.2f} | "
                 f"{'yes' if ref is not None and lg == ref else ('NO' if ref is not None else 'n/a')} |")
lines.append("")
j, cg, _ = load("120b-8G")
if j:
    s = j["stats"]; p = s.get("plan", {})
    bpt, cpt = s["decode_bytes_read_per_token"], s["decode_cpu_seconds_per_token"]
    lines.append(f"**120b layout at `--ram-budget 8G`** (`synth --preset gpt-oss-120b --sparse`: 36 layers, 128 experts, "
                 f"every weight a hole, so reads cost no device time here): peak RSS {s['peak_rss_bytes']/G:.2f} GiB, cgroup peak "
                 f"{int(cg.get('peak','0'))/G:.2f} GiB, OOM kills {cg.get('oom_kills','?')}; trunk pinned "
                 f"{p.get('trunk_pinned_bytes',0)/G:.2f} GiB, expert cache {p.get('expert_cache_bytes',0)/G:.2f} GiB; per decode token "
                 f"{bpt/1e9:.2f} GB read and {cpt:.2f} CPU s. Projected decode time per token, reads not overlapped with "
                 f"compute (an upper bound): **{cpt + bpt/3e9:.2f} s at 3 GB/s**, **{cpt + bpt/7e9:.2f} s at 7 GB/s**; on this "
                 f"disk ({fio/1e9:.2f} GB/s) {cpt + bpt/fio:.2f} s.\n")
else:
    lines.append("**120b layout at 8G**: failed.\n")
if j: proj120 = cpt + bpt/3e9
if unl:
    j4 = load("20b-4G")[0] if "4G" in budgets else None
    r4 = j4["stats"]["decode_seconds_per_token"] / unl if j4 else None
    res = []
    if r4 is not None: res.append(f"20b at 4G is {r4:.2f}x of unlimited ({'met' if r4 <= 1.5 else 'NOT met'})")
    if j: res.append(f"120b at 8G projects to {proj120:.2f} s/token at 3 GB/s ({'met' if proj120 < 1.5 else 'NOT met'})")
    lines.append(f"Target (issue 19): 20b at 4 GiB within 1.5x of unlimited; 120b at 8 GiB under 1.5 s/token at 3 GB/s. "
                 f"Here: {'; '.join(res)}. The unlimited run also starts cold (page cache dropped), so over {n} tokens it "
                 f"reads about as much as the 4G one: what the budget buys shows at 2G, where the pinned trunk and the "
                 f"expert cache no longer hold a token's working set. "
                 f"Columns as in the Memory ladder section; *decode CPU s / token* is user + system CPU of all threads.\n")
text = "\n".join(lines) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section(path, "## gpt-oss memory ladder", text)
PY
rm -rf "$out"
