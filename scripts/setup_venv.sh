#!/usr/bin/env bash
# Create ./.venv (once) and install gradcraft into it, with the extras given as $1, comma separated:
#   plot (matplotlib: loss.png), serve (fastapi, uvicorn: gradcraft serve), cuda (CuPy),
#   test (the test oracles and ruff; includes what plot and serve install). E.g. "plot,serve" or "test,cuda".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"

# The playground's browser test (tests/test_playground.py) drives a headless Chromium. Install Debian's
# package where none is on PATH and apt-get can run (as root, or through sudo without a password);
# elsewhere the test skips and says why.
if [[ ",$extras," == *",test,"* ]] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
   && ! command -v google-chrome >/dev/null && command -v apt-get >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  if [ -z "$sudo" ] || sudo -n true 2>/dev/null; then
    echo "installing chromium (for the browser test of the playground)"
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null; } \
      || echo "note: could not install chromium; tests/test_playground.py will be skipped"
  else
    echo "note: no chromium and no root to install it (apt-get install chromium); tests/test_playground.py will be skipped"
  fi
fi
