#!/usr/bin/env bash
# Runs every libFuzzer harness of a build (MS_FUZZ=ON) for a fixed time, two at a time, from the
# seeds in tests/fuzz/corpus, and prints one line per harness (executions, coverage, result).
# Exits 1 if any harness found a crash, leak, UB, timeout or out-of-memory (its input is kept).
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS_PER_HARNESS [OUT_DIR] [PARALLEL]
#   (FUZZ_ONLY="fuzz_st fuzz_cfg" runs only those harnesses)
#   OUT_DIR keeps the grown corpora, logs and any finding (default: a temporary directory,
#   removed when nothing was found).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR SECONDS [OUT_DIR] [PARALLEL]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [OUT_DIR] [PARALLEL]}
out=${3:-}
par=${4:-2}
keep=1
if [ -z "$out" ]; then out=$(mktemp -d "${TMPDIR:-/tmp}/msfuzz-run.XXXXXX"); keep=0; fi
mkdir -p "$out"
harnesses=()
for src in "$here"/fuzz_*.c; do
  h=$(basename "$src" .c)
  if [ -z "${FUZZ_ONLY:-}" ] || [[ " $FUZZ_ONLY " == *" $h "* ]]; then harnesses+=("$h"); fi
done

run_one() { # harness -> $out/<h>.log, $out/<h>.rc
  local h=$1 dir="$out/$1"
  mkdir -p "$dir/corpus"
  [ -d "$here/corpus/$h" ] && cp -n "$here/corpus/$h"/* "$dir/corpus/" 2>/dev/null
  # detect_leaks: every harness frees what it is given; a leak is a finding.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/corpus" >"$out/$h.log" 2>&1
  echo $? >"$out/$h.rc"
}

fail=0
for ((i = 0; i < ${#harnesses[@]}; i += par)); do
  for ((j = i; j < i + par && j < ${#harnesses[@]}; j++)); do run_one "${harnesses[$j]}" & done
  wait
done
total=0
for h in "${harnesses[@]}"; do
  rc=$(cat "$out/$h.rc")
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$h.log" | grep -o '[0-9]*$' | tail -1)
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
  printf 'fuzz: %-16s %10s executions in %ss, cov %s ft %s corpus %s: %s\n' "$h" "${execs:-?}" "$secs" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
  if [ "$result" != OK ]; then
    grep -E 'ERROR|ORACLE|SUMMARY|runtime error' "$out/$h.log" | head -5 | sed 's/^/    /'
  fi
done
echo "fuzz: ${#harnesses[@]} harnesses, $total executions in total"
if [ $fail -ne 0 ]; then
  echo "fuzz: FAILED: logs and inputs in $out" >&2
  exit 1
fi
[ $keep -eq 0 ] && rm -rf "$out"
exit 0
