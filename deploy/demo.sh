#!/usr/bin/env bash
# The default job on a fresh machine: install dependencies, build, then `moestream demo`
# (writes a small synthetic Kimi K3 checkpoint and generates from it). Extra arguments go to demo.
# Each stage says what it does and how long it took; the build's own output goes to
# build/demo-build.log (shown if it fails), with a line per finished percent of the build.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
say() { printf 'demo.sh: %s\n' "$*" >&2; }
say "checking the Debian packages (deploy/install-deps.sh installs what is missing)"
bash deploy/install-deps.sh
say "configuring (cmake -S . -B build)"
mkdir -p build
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build/demo-build.log 2>&1; then
  cat build/demo-build.log >&2; say "configuring failed (above; build/demo-build.log)"; exit 1
fi
say "building with $(nproc) jobs (a few minutes the first time; progress below)"
last=""
set +e
cmake --build build -j"$(nproc)" 2>&1 | tee -a build/demo-build.log | while IFS= read -r line; do
  pct=$(printf '%s\n' "$line" | sed -n 's/^\[ *\([0-9]*\)%\].*/\1/p')
  if [ -n "$pct" ] && [ "$pct" != "$last" ] && [ $((pct % 10)) -eq 0 ]; then
    say "  build ${pct}% ($((SECONDS - t0)) s)"; last=$pct
  fi
done
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  tail -n 40 build/demo-build.log >&2; say "the build failed (the end of build/demo-build.log above)"; exit 1
fi
say "built in $((SECONDS - t0)) s; running moestream demo $*"
exec build/moestream demo "$@"
