#!/usr/bin/env bash
# Lint with ruff (rules and line length in pyproject.toml: [tool.ruff]); scripts/test.sh runs it before the tests.
# To apply the safe fixes: ruff check --fix gradcraft tests bench scripts (the rest by hand).
# No `ruff format --check`: the project does not use the formatter (pyproject.toml says why: it would explode
# the aligned continuation lines into one argument a line); the E and W rules keep the layout consistent.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff="ruff"
[ -x .venv/bin/ruff ] && ruff=".venv/bin/ruff"
"$ruff" check gradcraft tests bench scripts
