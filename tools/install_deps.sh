#!/usr/bin/env bash
# Installs moegraph's build dependencies from Debian packages (Debian 12), skipping what is
# already there. The CUDA toolkit is optional: without nvcc the build is CPU-only; so is
# libcpp-httplib-dev (the HTTP server of `moegraph serve`; without it `serve` says so).
set -euo pipefail

packages=(build-essential cmake ninja-build ccache pkg-config
          libprotobuf-dev protobuf-compiler libeigen3-dev libspdlog-dev libfmt-dev
          libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev
          libcpp-httplib-dev python3)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
