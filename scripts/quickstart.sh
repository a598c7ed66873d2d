#!/usr/bin/env bash
# Set up .venv and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/gradcraft demo
