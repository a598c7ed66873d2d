#!/usr/bin/env bash
# Set up (test extras: PyTorch CPU, HF tokenizers, tiktoken as oracles) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh test
# TODO(issue 16): enable once the tree is formatted (ruff check --fix; ruff format), so CI runs ruff:
# bash scripts/lint.sh
exec .venv/bin/python -m pytest -q -n 2 "$@"
