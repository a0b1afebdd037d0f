#!/usr/bin/env bash
# Trunk pack benchmark (issue 11): pack the k3-slice's BF16 trunk with `moestream pack-trunk`
# (beside the model, MODEL.trunk-pack; kept for later runs), report its size against the BF16
# trunk, the codec on Gaussian BF16 (like trained weights) and uniform BF16 (like synth) with the
# decode GB/s of one core, then decode s/token at each budget with and without the pack,
# alternating (runs without, with, without, with ...) so both see the same machine, each in a
# memory cgroup equal to its budget with the page cache dropped first; logits must be
# bit-identical. Writes docs/PERFORMANCE.md (section "Trunk pack").
#
# Modes: none (no pack), pack (blocks decoded inside the matmul kernel, the default), reader (the
# pack decoded by the reader threads into the ring, MS_TPACK_DECODE=reader).
#
# usage: tests/bench/trunk-pack.sh [--model DIR] [--budgets "1G"] [--reps N] [-n N] [--repack]
#                                  [--modes "none pack reader"]
# Needs root (cgroups, drop_caches), the slice (~41 GB, written once by `moestream synth
# --preset k3-slice`) and ~4.5 GB of disk for its pack.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
model=${MS_BENCH_DIR:-$root/build-bench}/k3-slice-3
budgets="1G"
reps=2
ntok=8
repack=0
modes="none pack reader"
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --repack) repack=1; shift ;;
    --modes) modes=$2; shift 2 ;;
    *) echo "usage: $0 [--model DIR] [--budgets LIST] [--reps N] [-n N] [--repack]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "trunk-pack bench: needs root (cgroups, drop_caches)" >&2; exit 2; }
. tests/bench/lib.sh
bench_build
bin=$root/build/moestream
out=$(mktemp -d)
bench_slice "$bin" "$model"
pack=${model%/}.trunk-pack
ids="100,2000,30000,4000,500,60000,7000,80"

cut -d' ' -f1-3 /proc/loadavg > "$out/load-before.txt" # the machine may be shared: say how busy it was
if [ $repack -eq 1 ] || [ ! -f "$pack/trunk.pack" ]; then
  drop
  t0=$(date +%s.%N)
  "$bin" pack-trunk --model "$model" --out "$pack" > "$out/pack.txt"
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b - a}' > "$out/pack-seconds.txt"
else
  echo "(pack already there: $pack; --repack to write it again)" > "$out/pack.txt"
fi
cut -d' ' -f1-3 /proc/loadavg > "$out/load-codec.txt"
"$bin" pack-trunk --bench --mib 256 > "$out/codec.txt"

for b in $budgets; do
  for r in $(seq 1 "$reps"); do
    for p in $modes; do
      drop
      cut -d' ' -f1-3 /proc/loadavg > "$out/load-$b-$p-$r.txt"
      args=(run --model "$model" --ids "$ids" -n "$ntok" --temperature 0 --json --quiet
            --dump-logits "$out/logits-$b-$p-$r.bin" --trunk-pack "$([ $p = none ] && echo none || echo "$pack")")
      export MS_TPACK_DECODE=$([ $p = reader ] && echo reader || echo kernel)
      timer=(/usr/bin/time -f "%U %S" -o "$out/cpu-$b-$p-$r.txt")
      set +e
      if [ "$b" = unlimited ]; then
        "${timer[@]}" "$bin" "${args[@]}" > "$out/run-$b-$p-$r.json"
        rc=$?
        echo "limit=none peak=0 oom_kills=0" > "$out/cgroup-$b-$p-$r.txt"
      else
        bash tests/cgroup-run.sh "$(to_bytes "$b")" "$out/cgroup-$b-$p-$r.txt" "${timer[@]}" "$bin" "${args[@]}" --ram-budget "$b" \
          > "$out/run-$b-$p-$r.json"
        rc=$?
      fi
      set -e
      [ $rc -eq 0 ] || echo "trunk-pack bench: $b $p run $r failed with status $rc" >&2
    done
  done
done
cut -d' ' -f1-3 /proc/loadavg > "$out/load-after.txt"

python3 - "$out" "$model" "$pack" "$ntok" "$reps" "$budgets" "$modes" <<'PY'
import json, os, sys, subprocess, datetime, statistics, glob, re
out, model, pack, ntok, reps, budgets = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split()
modes = sys.argv[7].split()
label = {"none": "no", "pack": "yes: decoded in the matmul kernel", "reader": "yes: decoded by the reader threads"}
def sh(c): return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
def rd(f): return open(f"{out}/{f}").read().strip()
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
# The BF16 trunk the pack holds, from the pack's own index (tensor count, bytes).
packed = os.path.getsize(f"{pack}/trunk.pack")
import struct
with open(f"{pack}/trunk.pack", "rb") as f:
    h = f.read(64); nt, = struct.unpack("<I", h[12:16]); ib, = struct.unpack("<Q", h[24:32]); idx = f.read(ib)
q, raw, data = 0, 0, 0
for _ in range(nt):
    nl, = struct.unpack("<H", idx[q:q+2]); q += 2 + nl
    rows, cols, rpb, off, nbytes, xh = struct.unpack("<qqqQQQ", idx[q:q+48]); q += 48
    nb, = struct.unpack("<I", idx[q:q+4]); q += 4 + 8 * nb
    raw += 2 * rows * cols; data += nbytes
codec = rd("codec.txt").splitlines()
runs = {}
ref = None
same = True
for b in budgets:
    for p in modes:
        for r in range(1, reps + 1):
            try: s = json.load(open(f"{out}/run-{b}-{p}-{r}.json"))["stats"]
            except Exception: continue
            lg = open(f"{out}/logits-{b}-{p}-{r}.bin", "rb").read()
            if ref is None: ref = lg
            same = same and lg == ref
            cg = dict(x.split("=") for x in open(f"{out}/cgroup-{b}-{p}-{r}.txt").read().split())
            cpu_s = sum(float(x) for x in rd(f"cpu-{b}-{p}-{r}.txt").split()[-2:])
            runs.setdefault((b, p), []).append((s, cg, rd(f"load-{b}-{p}-{r}.txt"), cpu_s))
L = []
L.append("## Trunk pack\n")
L.append(f"Measured {datetime.date.today()} on {cpu}, {os.cpu_count()} cores; model: the k3-slice "
         f"(`moestream synth --preset k3-slice --layers 3`, seed 1). Command: `sudo bash tests/bench/trunk-pack.sh`. "
         f"Load average (1, 5, 15 min) before: {rd('load-before.txt')}, at the codec bench: {rd('load-codec.txt')}, "
         f"after: {rd('load-after.txt')} (the machine is shared: the lead may re-run on an idle one).\n")
ps = f", written and verified in {float(rd('pack-seconds.txt')):.0f} s" if os.path.exists(f"{out}/pack-seconds.txt") else ""
L.append(f"**Pack size**: {nt} BF16 trunk matrices, {raw/2**30:.2f} GiB of BF16 -> {data/2**30:.2f} GiB of blocks "
         f"(file {packed/2**30:.2f} GiB with index and alignment): **{100*(1-data/raw):.1f}% smaller**{ps}. "
         f"`pack-trunk` said: {rd('pack.txt')}\n")
L.append("**Codec** (`moestream pack-trunk --bench --mib 256`: 256 MiB of each, 64 KiB blocks, the best of 5 decodes "
         "on one core, checksums verified):\n")
L.append("```\n" + "\n".join(codec) + "\n```\n")
L.append("| budget | trunk pack | runs | load s (each run) | trunk pinned (matrices, bytes held) | decode s/token (each run) | median | CPU s per run (user+sys, each) | GB read / decode token | streamed trunk: pack bytes / BF16 bytes | I/O wait | peak RSS | cgroup peak | load at start (last run) |")
L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
med = {}
for b in budgets:
    for p in modes:
        rs = runs.get((b, p), [])
        if not rs: L.append(f"| {b} | {label[p]} | 0 | failed | | | | | | | | | | |"); continue
        d = [x[0]["decode_seconds_per_token"] for x in rs]
        med[(b, p)] = statistics.median(d)
        s, cg, ld, _ = rs[-1]
        pl = s["plan"]
        loads = ", ".join(f"{x[0]['load_seconds']:.1f}" for x in rs)
        L.append(f"| {b} | {label[p]} | {len(rs)} | {loads} | "
                 f"{pl['trunk_pinned']} of {pl['trunk_matrices']}, {pl['trunk_pinned_bytes']/2**30:.2f} GiB | "
                 f"{', '.join(f'{x:.2f}' for x in d)} | "
                 f"**{med[(b, p)]:.2f}** | {', '.join(f'{x[3]:.0f}' for x in rs)} | {s['decode_bytes_read_per_token']/1e9:.2f} | "
                 f"{(s.get('trunk_pack_bytes_read', 0) / s['trunk_pack_bytes_decoded']) if s.get('trunk_pack_bytes_decoded') else 0:.3f} | "
                 f"{100*s['io_wait_share']:.0f}% | {s['peak_rss_bytes']/2**30:.2f} GiB | "
                 f"{int(cg.get('peak', '0'))/2**30:.2f} GiB | {ld} |")
L.append("")
for b in budgets:
    for p in modes:
        if p != "none" and (b, "none") in med and (b, p) in med:
            d = 100 * (1 - med[(b, p)] / med[(b, 'none')])
            L.append(f"At {b}, pack {label[p][5:]}: decode s/token **{abs(d):.1f}% {'lower' if d >= 0 else 'higher'}** "
                     f"than without the pack (medians of {reps} alternating runs each; target: at least 15% at 1G); "
                     f"load {statistics.median(x[0]['load_seconds'] for x in runs[(b, p)]):.1f} s against "
                     f"{statistics.median(x[0]['load_seconds'] for x in runs[(b, 'none')]):.1f} s.")
L.append(f"Logits of every run (`--dump-logits`, prompt and generated positions): "
         f"**{'bit-identical' if same else 'DIFFERENT'}** with and without the pack.\n")
L.append("What the figures mean, and what to expect on the released checkpoint and on an idle machine: "
         "docs/TRUNK-PACK.md, section \"Figures\".\n")
text = "\n".join(L) + "\n"
print(text)
sys.path.insert(0, "tests/bench")
from docsection import put_section
put_section("docs/PERFORMANCE.md", "## Trunk pack", text)
PY
rm -rf "$out"
