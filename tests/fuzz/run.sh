#!/usr/bin/env bash
# Runs every libFuzzer harness of a build (MS_FUZZ=ON) from the seeds and saved findings in
# tests/fuzz/corpus, two at a time, and prints one line per harness (executions, coverage,
# result). Exits 1 if any harness found a crash, leak, UB, timeout or out-of-memory (its input
# is kept and named).
#
# Two modes:
#   run.sh BUILD_DIR [OUT_DIR] [PARALLEL]
#       deterministic (what tests/run.sh and CI run): every corpus input is replayed, then each
#       harness mutates with the fixed seed 1 for the number of executions in runs.txt. The
#       same commit gives the same executions and the same result on every run.
#   run.sh --explore SECONDS BUILD_DIR [OUT_DIR] [PARALLEL]
#       open-ended: a random seed per harness, SECONDS each. Not part of CI. A finding is
#       fixed, then its input is added to tests/fuzz/corpus/<harness>/ so that the
#       deterministic mode replays it from then on (docs/RELIABILITY.md, Fuzzing).
#   FUZZ_ONLY="fuzz_st fuzz_k3_cfg" runs only those harnesses. OUT_DIR keeps the grown corpora,
#   logs and any finding (default: a temporary directory, removed when nothing was found).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: run.sh BUILD_DIR [OUT_DIR] [PARALLEL] | run.sh --explore SECONDS BUILD_DIR [OUT_DIR] [PARALLEL]"
explore=0
if [ "${1:-}" = --explore ]; then
  explore=1
  secs=${2:?$usage}
  shift 2
  [[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --explore takes whole seconds, got '$secs'" >&2; exit 2; }
fi
build=${1:?$usage}
out=${2:-}
par=${3:-2}
[ -d "$build" ] || { echo "run.sh: no build directory $build" >&2; exit 2; }
keep=1
if [ -z "$out" ]; then out=$(mktemp -d "${TMPDIR:-/tmp}/msfuzz-run.XXXXXX"); keep=0; fi
mkdir -p "$out"
harnesses=()
for src in "$here"/fuzz_*.c; do
  h=$(basename "$src" .c)
  if [ -z "${FUZZ_ONLY:-}" ] || [[ " $FUZZ_ONLY " == *" $h "* ]]; then harnesses+=("$h"); fi
done

runs_of() { # harness -> its executions from runs.txt (a harness missing there is a mistake)
  local r
  r=$(awk -v h="$1" '$1 == h { print $2 }' "$here/runs.txt")
  [ -n "$r" ] || { echo "run.sh: $1 has no line in tests/fuzz/runs.txt" >&2; return 1; }
  echo "$r"
}

run_one() { # harness -> $out/<h>.log, $out/<h>.rc
  local h=$1 dir="$out/$1" limit
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  [ -d "$here/corpus/$h" ] && cp "$here/corpus/$h"/* "$dir/corpus/" 2>/dev/null
  local norand=""
  if [ $explore -eq 1 ]; then
    limit=(-seed=0 -max_total_time="$secs")
  else
    # Addresses feed libFuzzer's comparison tracing (pointer compares), so address-space
    # randomisation would steer the mutations differently on every run: turn it off.
    setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
    # -reload=0: libFuzzer would otherwise re-read the corpus directory on a timer.
    limit=(-seed=1 -reload=0 -runs="$(runs_of "$h")") || { echo 2 >"$out/$h.rc"; return; }
  fi
  # detect_leaks: every harness frees what it is given; a leak is a finding.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    $norand "$build/$h" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/corpus" >"$out/$h.log" 2>&1
  echo $? >"$out/$h.rc"
}

for h in "${harnesses[@]}"; do
  [ -x "$build/$h" ] || { echo "run.sh: $build/$h is missing (build the 'fuzz' target)" >&2; exit 2; }
  [ $explore -eq 1 ] || runs_of "$h" >/dev/null || exit 2
done
fail=0
for ((i = 0; i < ${#harnesses[@]}; i += par)); do
  for ((j = i; j < i + par && j < ${#harnesses[@]}; j++)); do run_one "${harnesses[$j]}" & done
  wait
done
total=0
for h in "${harnesses[@]}"; do
  rc=$(cat "$out/$h.rc")
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$h.log" | grep -o '[0-9]*$' | tail -1)
  seeds=$(grep -o 'seed corpus: files: [0-9]*' "$out/$h.log" | grep -o '[0-9]*$' | tail -1)
  secs_used=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$out/$h.log" | grep -o 'in [0-9]*' | grep -o '[0-9]*')
  last=$(grep -E '^#[0-9]+' "$out/$h.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  corp=$(grep -o 'corp: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  total=$((total + ${execs:-0}))
  art=$(ls "$out/$h"/crash-* "$out/$h"/leak-* "$out/$h"/timeout-* "$out/$h"/oom-* 2>/dev/null | head -1)
  if [ "$rc" = 0 ] && [ -z "$art" ]; then
    result=OK
  else
    result="FINDING (exit $rc${art:+, input $art})"
    fail=1
  fi
  printf 'fuzz: %-16s %8s seeds replayed, %10s executions in %ss, cov %s ft %s corpus %s: %s\n' "$h" "${seeds:-?}" \
    "${execs:-?}" "${secs_used:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
  if [ "$result" != OK ]; then
    grep -E 'ERROR|ORACLE|SUMMARY|runtime error|run.sh:' "$out/$h.log" | head -5 | sed 's/^/    /'
  fi
done
mode="deterministic (seed 1, executions from runs.txt)"
[ $explore -eq 1 ] && mode="explore (random seeds, $secs s each)"
echo "fuzz: ${#harnesses[@]} harnesses, $total executions in total, $mode"
if [ $fail -ne 0 ]; then
  echo "fuzz: FAILED: logs and inputs in $out" >&2
  [ $explore -eq 1 ] && echo "fuzz: fix the finding, then copy its input into tests/fuzz/corpus/<harness>/" >&2
  exit 1
fi
[ $keep -eq 0 ] && rm -rf "$out"
exit 0
