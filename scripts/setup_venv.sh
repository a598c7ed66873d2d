#!/usr/bin/env bash
# Create ./.venv (once) and install gradcraft into it, with the extras given as $1, comma separated:
#   plot (matplotlib: loss.png), serve (fastapi, uvicorn: gradcraft serve), cuda (CuPy),
#   test (the test oracles; includes what plot and serve install). E.g. "plot,serve" or "test,cuda".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
