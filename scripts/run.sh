#!/usr/bin/env bash
# The run command: install what is missing, then start Inloop (arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
go run . "$@"
