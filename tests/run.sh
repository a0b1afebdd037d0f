#!/usr/bin/env bash
# The test command: install dependencies, build with -Werror, run ctest, then the same tests
# under AddressSanitizer + UBSan, then every fuzz harness (tests/fuzz, clang) on its corpus and a fixed seed.
# Uses ../shared fixtures when present (tests skip them visibly otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
t_start=$(date +%s)
stage() { echo "== $1 (at $(($(date +%s) - t_start)) s)"; } # each stage says when it began
if [ ! -d ../shared/fixtures ]; then
  echo "NOTE: ../shared/fixtures not found: the reference-fixture checks will be SKIPPED" >&2
  echo "      (each test prints its SKIP lines; see them with ctest -V)" >&2
fi
bash deploy/install-deps.sh
stage "build (RelWithDebInfo, -Werror)"
cmake -S . -B build -DMS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
stage "ctest"
(cd build && ctest --output-on-failure -j"$((jobs + 1))") # one more than the cores: the serve tests wait on sockets
stage "build (ASan + UBSan)"
cmake -S . -B build-asan -DMS_WERROR=ON -DMS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
stage "ctest under ASan + UBSan"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$((jobs + 1))")
# Fuzz step: every libFuzzer harness of tests/fuzz, deterministic: its corpus and saved findings
# replayed, then a fixed number of executions (tests/fuzz/runs.txt) with the fixed seed 1, so the
# same commit gives the same result on every run (about 2.5 min on 2 cores, build excluded). A
# crash, leak or UB fails the run. Open-ended fuzzing with random seeds is a separate command
# (tests/fuzz/run.sh --explore, docs/RELIABILITY.md).
stage "fuzz (clang, libFuzzer + ASan + UBSan, deterministic: corpus replay + seed 1)"
if bash deploy/install-fuzz-deps.sh; then
  fuzz_t0=$(date +%s)
  CC=clang cmake -S . -B build-fuzz -DMS_FUZZ=ON -DMS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz >/dev/null
  bash tests/fuzz/run.sh build-fuzz "" "$jobs"
  echo "fuzz: step took $(($(date +%s) - fuzz_t0)) s (build included)"
else
  echo "################################################################" >&2
  echo "SKIP: fuzz step: clang with libFuzzer is not available and could not be installed" >&2
  echo "################################################################" >&2
fi
echo "== done in $(($(date +%s) - t_start)) s"
