#!/usr/bin/env bash
# Lint and format check with ruff (configured in pyproject.toml: [tool.ruff]); scripts/test.sh runs it first.
# To fix what can be fixed: ruff check --fix gradcraft tests bench scripts && ruff format gradcraft tests bench scripts
set -euo pipefail
cd "$(dirname "$0")/.."
ruff="ruff"
[ -x .venv/bin/ruff ] && ruff=".venv/bin/ruff"
paths=(gradcraft tests bench scripts)
"$ruff" check "${paths[@]}"
"$ruff" format --check "${paths[@]}"
