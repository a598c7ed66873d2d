#!/usr/bin/env bash
# Set up (test extras: PyTorch CPU, HF tokenizers, tiktoken as oracles) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh test
bash scripts/lint.sh  # ruff's findings fail the run (set -e), before the tests
exec .venv/bin/python -m pytest -q -n 2 "$@"
