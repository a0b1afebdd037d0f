#!/usr/bin/env bash
# scratch-file: a prefill span whose scratch memory cannot hold, in a scratch file
# (--scratch-dir) beside several spans in memory (--scratch-dir off), on the `small` synthetic
# K3 model with a 2,048-token prompt of random ids, each run cold (page cache dropped) inside a
# memory cgroup equal to its --ram-budget: the checkpoint's bytes read, what the process read
# beyond them (the file's pages read back), what the disk was written (/proc/diskstats of the
# model's device: the file's write-back; run nothing else meanwhile), seconds, peak, tokens.
# Prints a markdown table (and writes docs/PERFORMANCE.md section "Long prompts: a span's
# scratch in a file" with --doc FILE).
#
# usage: tests/bench/scratch-file.sh [--bin BINARY] [--budgets "80M 90M 120M"] [--doc FILE]
# Needs root (cgroups, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin= budgets="80M 90M 120M" doc=
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$(realpath "$2"); shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BINARY] [--budgets LIST] [--doc FILE]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "scratch-file: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_bin_out
model=$out/small
"$bin" synth --preset small --out "$model" > /dev/null
python3 -c "
import random
r = random.Random(2048)
print(','.join(str(r.randrange(1, 4000)) for _ in range(2048)))" > "$out/ids.txt"
dev=$(basename "$(df --output=source "$model" | tail -1)")
ds() { awk -v d="$dev" '$3==d{printf "%d %d\n", $6, $10}' /proc/diskstats; }
mkdir -p "$out/scratch"
for b in $budgets; do
  for mode in memory file; do
    sd=off
    [ $mode = file ] && sd=$out/scratch
    drop
    a=$(ds)
    set +e
    bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cg-$mode-$b.txt" "$bin" run --model "$model" \
      --ids-file "$out/ids.txt" -n 2 --json --quiet --ram-budget "$b" --scratch-dir "$sd" > "$out/run-$mode-$b.json" 2> "$out/err-$mode-$b.txt"
    rc=$?
    set -e
    sync
    z=$(ds)
    echo "$a $z" > "$out/disk-$mode-$b.txt"
    [ $rc -eq 0 ] || { echo "scratch-file: $mode at $b failed with status $rc" >&2; tail -2 "$out/err-$mode-$b.txt" >&2; }
  done
done
python3 - "$out" "$budgets" "$doc" <<'PY'
import json, sys, subprocess, datetime
out, budgets, doc = sys.argv[1], sys.argv[2].split(), sys.argv[3]
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
L = ["## Long prompts: a span's scratch in a file\n",
     f"Measured {datetime.date.today()} on {cpu}; model: `moestream synth --preset small` (a K3 of 8 layers, 650 MB), "
     "a 2,048-token prompt of random ids, 2 tokens generated. Each run cold in a memory cgroup equal to `--ram-budget`. "
     "*memory*: `--scratch-dir off` (spans as long as memory holds); *file*: `--scratch-dir DIR` (the plan may take one "
     "span of the whole prompt with its scratch in a file). *checkpoint GB* is what the engine read of the model; "
     "*file read GB* what the process read beyond it (`/proc/self/io`); *disk written GB* the model's device's "
     "written sectors over the run (`/proc/diskstats`: the file's write-back); *estimate* the plan's scratch traffic.\n",
     "Command: `sudo bash tests/bench/scratch-file.sh`\n",
     "| budget | mode | plan | prefill s | checkpoint GB | file read GB | disk written GB | estimate GB | file / window MB | cgroup peak MiB | OOM kills | tokens = memory |",
     "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for b in budgets:
    ref = None
    for mode in ("memory", "file"):
        try:
            j = json.load(open(f"{out}/run-{mode}-{b}.json"))
        except Exception:
            L.append(f"| {b} | {mode} | failed | | | | | | | | | |")
            continue
        s, p = j["stats"], j["stats"]["plan"]
        ck = s["bytes_read_experts"] + s["bytes_read_trunk"] + s["bytes_read_at_load"]
        ra, wa, rz, wz = map(int, open(f"{out}/disk-{mode}-{b}.txt").read().split())
        cg = dict(x.split("=") for x in open(f"{out}/cg-{mode}-{b}.txt").read().split())
        plan = (f"one span of {p['prefill_span']} in a file" if p.get("scratch_file") else
                f"spans of {p['prefill_span']}")
        if ref is None: ref = j["generated_ids"]
        fw = f"{p['scratch_file_bytes']/2**20:.0f} / {p['scratch_window_bytes']/2**20:.0f}" if p.get("scratch_file") else "-"
        L.append(f"| {b} | {mode} | {plan} | {s['prefill_seconds']:.1f} | {ck/1e9:.2f} | {max(s['process_bytes_read']-ck,0)/1e9:.2f} | "
                 f"{(wz-wa)*512/1e9:.2f} | {p.get('scratch_traffic_bytes',0)/1e9:.2f} | {fw} | {int(cg.get('peak',0))/2**20:.0f} | "
                 f"{cg.get('oom_kills','?')} | {'yes' if j['generated_ids'] == ref else 'NO'} |")
text = "\n".join(L) + "\n"
print(text)
if doc:
    sys.path.insert(0, "tests/bench")
    from docsection import put_section
    put_section(doc, "## Long prompts: a span's scratch in a file", text)
PY
