#!/usr/bin/env bash
# The default job on a fresh machine: install dependencies, build, then `moestream demo`
# (writes a small synthetic Kimi K3 checkpoint and generates from it). Extra arguments go to demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec build/moestream demo "$@"
