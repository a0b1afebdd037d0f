#!/usr/bin/env bash
# Installs the Debian packages moestream needs to build and test (run as root, or with sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libzmq3-dev libprotobuf-c-dev
      protobuf-c-compiler uuid-dev libxxhash-dev libutf8proc-dev libmicrohttpd-dev libedit-dev python3 python3-jinja2 iproute2 curl man-db
      bsdutils)
# Chromium for the chat page's test in a real browser (headless; test_serve_web).
pkgs+=(chromium)
# Node + npm for the OpenAI-client test of `serve` (a Node install from elsewhere is kept).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then pkgs+=(nodejs npm); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
