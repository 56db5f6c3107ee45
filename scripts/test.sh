#!/usr/bin/env bash
# The test command: install what is missing, then vet and test everything.
# Long end-to-end runs and benchmarks are not part of it; see README.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/fixtures.sh   # real tokenizer files + reference encoders, for differential tests
go vet ./...
go test -count=1 -timeout 20m ./...
