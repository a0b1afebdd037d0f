#!/usr/bin/env bash
# in-ram: a model that fits in RAM, run with no budget (the plan takes MemAvailable), the
# previous binary beside this one: reading experts into the cache with O_DIRECT and with
# --buffered-io (this binary with --mmap off), and this binary's default where the model fits
# (--mmap auto: experts and pinned trunk used in place from the files' mappings). Each is run
# cold (page cache dropped first) and the buffered and mapped ones again warm (right after,
# cache kept: what a second run of a script finds). Reports bytes read from disk against the
# model's size, the expert cache's evictions, misses and peak against its plan, load, prefill
# and decode speed, the process's peak RSS and the generated tokens compared. Default model:
# the real-width gpt-oss-20b (`synth --preset gpt-oss-20b`, 13 GiB). Writes docs/PERFORMANCE.md
# section "In RAM: every weight read once" and prints it.
#
# usage: tests/bench/in-ram.sh --old BINARY [--bin BINARY] [--model DIR] [--lengths "64 512"]
#          [-n 32] [--doc FILE]
# Needs root (drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/gpt-oss-20b
lengths="64 512" n=32 bin= old= doc=docs/PERFORMANCE.md
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$(realpath "$2"); shift 2 ;;
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --model) model=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 --old BINARY [--bin BINARY] [--model DIR] [--lengths LIST] [-n N] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$old" ] || { echo "in-ram: --old BINARY is required (the previous build, for the side-by-side)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "in-ram: needs root (drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
[ -f "$model/config.json" ] || { mkdir -p "$(dirname "$model")"; "$bin" synth --preset gpt-oss-20b --out "$model"; }
vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print((c.get('text_config') or c)['vocab_size'])" "$model/config.json")

for len in $lengths; do
  python3 -c "
import random
r = random.Random($len)
print(','.join(str(r.randrange(1, $vocab)) for _ in range($len)))" > "$out/ids-$len.txt"
  # which:io:cache; old and new alternate within each I/O mode so drift hits both alike
  for r in old:direct:cold new:direct:cold old:buffered:cold new:buffered:cold old:buffered:warm new:buffered:warm \
           new:mapped:cold new:mapped:warm; do
    IFS=: read -r which io cache <<< "$r"
    exe=$bin flag=()
    [ "$which" = old ] && exe=$old
    [ "$io" = buffered ] && flag+=(--buffered-io)
    [ "$which" = new ] && [ "$io" != mapped ] && flag+=(--mmap off)
    [ "$cache" = cold ] && drop
    r=$which-$len-$io-$cache
    uptime > "$out/uptime-$r.txt"
    set +e
    "$exe" run --model "$model" --ids-file "$out/ids-$len.txt" -n "$n" --temperature 0 --json --quiet "${flag[@]}" \
      > "$out/run-$r.json" 2> "$out/err-$r.txt"
    rc=$?
    set -e
    [ $rc -eq 0 ] || { echo "in-ram: $r failed with status $rc" >&2; tail -3 "$out/err-$r.txt" >&2; }
    echo "in-ram: $r done" >&2
  done
done

python3 - "$out" "$model" "$lengths" "$n" "$doc" <<'PY'
import json, os, subprocess, sys, datetime
out, model, lengths, n, path = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
mem = sh("free -g | awk '/^Mem:/ {print $2}'")
size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
lines = ["## In RAM: every weight read once\n",
         f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores, {mem} GiB of RAM; model: "
         f"`{os.path.basename(model.rstrip('/'))}` ({size/1e9:.1f} GB), no `--ram-budget` (the plan takes what "
         f"the machine has available), prompts of random ids, {n} tokens generated greedily. *old* is the previous "
         f"binary, *new* this one. I/O: *direct* reads experts into the cache with O_DIRECT (new: `--mmap off`), "
         f"*buffered* through the page cache (`--buffered-io`), *mapped* is new's default where the model fits "
         f"(experts and pinned trunk used in place from the files' mappings). *cold*: page cache dropped before the "
         f"run; *warm*: run again right after, the cache as the run before left it. *read* is every byte the run "
         f"read from the checkpoint, load included (mapped: what the page cache lacked); *peak RSS* counts the "
         f"mapped file pages the process touched as well as its own.\n",
         "Command: `sudo bash tests/bench/in-ram.sh --old OLD_BINARY`\n",
         "| prompt | I/O | cache | binary | read GB | = model x | evictions | misses | cache peak / planned GiB | load s | prefill tok/s | decode tok/s | peak RSS GiB | load avg | tokens = old direct |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
runs = [("old", "direct", "cold"), ("new", "direct", "cold"), ("old", "buffered", "cold"), ("new", "buffered", "cold"),
        ("old", "buffered", "warm"), ("new", "buffered", "warm"), ("new", "mapped", "cold"), ("new", "mapped", "warm")]
for ln in lengths:
    try:
        ref = json.load(open(f"{out}/run-old-{ln}-direct-cold.json"))["generated_ids"]
    except Exception:
        ref = None
    for which, io, cache in runs:
        r = f"{which}-{ln}-{io}-{cache}"
        up = open(f"{out}/uptime-{r}.txt").read().split("load average:")[-1].split(",")[0].strip()
        try:
            j = json.load(open(f"{out}/run-{r}.json"))
        except Exception:
            lines.append(f"| {ln} | {io} | {cache} | {which} | failed | | | | | | | | | {up} | |")
            continue
        s = j["stats"]
        rd = s["bytes_read_at_load"] + s["bytes_read_experts"] + s["bytes_read_trunk"]
        same = "?" if ref is None else "yes" if ref == j["generated_ids"] else "NO"
        lines.append(f"| {ln} | {io} | {cache} | {which} | {rd/1e9:.1f} | {rd/size:.2f} | {s['expert_cache_evictions']} | "
                     f"{s['expert_cache_misses']} | {s['expert_cache_peak_bytes']/2**30:.2f} / "
                     f"{s['expert_cache_capacity_bytes']/2**30:.2f} | {s['load_seconds']:.1f} | "
                     f"{s['prefill_tokens_per_second']:.1f} | {s['decode_tokens_per_second']:.2f} | "
                     f"{s['peak_rss_bytes']/2**30:.2f} | {up} | {same} |")
text = "\n".join(lines) + "\n"
print(text)
if path:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(path, "## In RAM: every weight read once", text)
PY
