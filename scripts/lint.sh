#!/usr/bin/env bash
# Lint with ruff (rules and line length in pyproject.toml: [tool.ruff]); scripts/test.sh runs it before the tests.
# and checks the layout with ruff's formatter ([tool.ruff.format]).
# To fix: ruff format gradcraft tests bench scripts; ruff check --fix gradcraft tests bench scripts (the rest by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff="ruff"
[ -x .venv/bin/ruff ] && ruff=".venv/bin/ruff"
"$ruff" check gradcraft tests bench scripts
"$ruff" format --check gradcraft tests bench scripts
