#!/usr/bin/env bash
# The main job, end to end on this machine's CPU (or GPU with DEVICE=cuda):
#   1. set up .venv (gradcraft with the plot and serve extras)
#   2. tokenize the Python standard library's .py files (a corpus every machine has)
#   3. train the `demo` preset for a few minutes
#   4. print completions of a few code prompts
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh plot,serve   # the loss plot (matplotlib) and `gradcraft serve` (fastapi, uvicorn)
GC=.venv/bin/gradcraft
STDLIB=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
DATA=data/stdlib
RUN=runs/demo
STEPS=${STEPS:-600}
DEVICE=${DEVICE:-cpu}

echo "== 1/3 tokenize $STDLIB (*.py, site-packages excluded) -> $DATA"
$GC tokenize --data_dir "$STDLIB" --ext .py --exclude site-packages --output_path "$DATA/tokens.bin" \
    --vocab_path "$DATA/tokenizer.json" --vocab_size 4096 --sample_mb 20 --val_fraction 0.01

echo "== 2/3 train the demo preset for $STEPS steps on $DEVICE -> $RUN"
$GC train --dataset "$DATA/tokens.bin" --model_dir "$RUN" --preset demo --steps "$STEPS" --batch_size 16 \
    --max_lr 3e-3 --min_lr 3e-4 --warmup_steps 50 --checkpoint_every 200 --eval_every 200 --device "$DEVICE"

echo "== 3/3 generate"
for prompt in "def reverse_string(" "import os
" "class Stack:
    def push(self"; do
  echo "--- prompt: $prompt"
  $GC generate --model_dir "$RUN" --prompt "$prompt" --max_tokens 80 --temp 0.7 --top_k 40 --seed 1 --device "$DEVICE"
done
