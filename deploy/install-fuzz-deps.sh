#!/usr/bin/env bash
# Installs what the fuzz step of tests/run.sh needs: clang with its libFuzzer/sanitizer runtimes
# and llvm-symbolizer (run as root, or with sudo). Exits 0 when they are present afterwards, 1
# otherwise (the caller then skips the fuzz step loudly).
set -uo pipefail
pkgs=(clang libclang-rt-dev llvm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "install-fuzz-deps: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The libFuzzer runtime is what matters: link a do-nothing target with it.
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$t/t.c"
command -v clang >/dev/null && clang -fsanitize=fuzzer,address,undefined "$t/t.c" -o "$t/t" 2>/dev/null
