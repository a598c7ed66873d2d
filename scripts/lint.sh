#!/usr/bin/env bash
# Lint with ruff (rules and line length in pyproject.toml: [tool.ruff]); scripts/test.sh runs it before the tests.
# and checks the layout with ruff's formatter ([tool.ruff.format]).
# To fix: ruff format src tests bench scripts dev; ruff check --fix src tests bench scripts dev (the rest by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff="ruff"
[ -x .venv/bin/ruff ] && ruff=".venv/bin/ruff"
"$ruff" check src tests bench scripts dev
"$ruff" format --check src tests bench scripts dev
