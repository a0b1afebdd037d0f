#!/usr/bin/env bash
# The test command: install dependencies, build with -Werror, run ctest, then the same tests
# under AddressSanitizer + UBSan. Uses ../shared fixtures when present (tests skip them visibly
# otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [ ! -d ../shared/fixtures ]; then
  echo "NOTE: ../shared/fixtures not found: the reference-fixture checks will be SKIPPED" >&2
  echo "      (each test prints its SKIP lines; see them with ctest -V)" >&2
fi
bash deploy/install-deps.sh
echo "== build (RelWithDebInfo, -Werror)"
cmake -S . -B build -DMS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
echo "== ctest"
(cd build && ctest --output-on-failure -j"$jobs")
echo "== build (ASan + UBSan)"
cmake -S . -B build-asan -DMS_WERROR=ON -DMS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
echo "== ctest under ASan + UBSan"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
