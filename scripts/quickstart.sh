#!/usr/bin/env bash
# The main job, end to end on this machine's CPU (or GPU with DEVICE=cuda):
#   1. set up .venv (gradcraft with the plot and serve extras)
#   2. tokenize the Python standard library's .py files (a corpus every machine has)
#   3. train the `demo` preset for a few minutes
#   4. print completions of a few code prompts
# Run it again and it reuses what the first run made: the token file, and the run (an interrupted
# one is resumed; a finished one is left as it is), then prints the completions.
# GC (the command, which skips the venv's setup), CORPUS, DATA, RUN, PRESET, VOCAB_SIZE, STEPS, DEVICE
# and TRAIN_FLAGS override the defaults (tests/test_cli_usability.py runs the script on a tiny corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GC:-}" ]; then
  bash scripts/setup_venv.sh plot,serve   # the loss plot (matplotlib) and `gradcraft serve` (fastapi, uvicorn)
  GC=.venv/bin/gradcraft
fi
CORPUS=${CORPUS:-$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
DATA=${DATA:-data/stdlib}
RUN=${RUN:-runs/demo}
PRESET=${PRESET:-demo}
VOCAB_SIZE=${VOCAB_SIZE:-4096}
STEPS=${STEPS:-600}
DEVICE=${DEVICE:-cpu}
TRAIN_FLAGS=${TRAIN_FLAGS:---batch_size 16 --max_lr 3e-3 --min_lr 3e-4 --warmup_steps 50 --checkpoint_every 200 --eval_every 200}

if [ -f "$DATA/tokens.bin" ] && [ -f "$DATA/tokenizer.json" ]; then
  echo "== 1/3 reusing $DATA/tokens.bin (delete $DATA to tokenize again)"
else
  echo "== 1/3 tokenize $CORPUS (*.py, site-packages excluded) -> $DATA"
  $GC tokenize --data_dir "$CORPUS" --ext .py --exclude site-packages --output_path "$DATA/tokens.bin" \
      --vocab_path "$DATA/tokenizer.json" --vocab_size "$VOCAB_SIZE" --sample_mb 20 --val_fraction 0.01
fi

resume=()
if [ -f "$RUN/gradcraft_config.json" ]; then
  # a run this script started: continued where it stopped, or left as it is when it is finished
  echo "== 2/3 reusing the run in $RUN (resumed up to $STEPS steps; delete $RUN to train again)"
  resume=(--resume)
else
  echo "== 2/3 train the $PRESET preset for $STEPS steps on $DEVICE -> $RUN"
fi
# shellcheck disable=SC2086  # TRAIN_FLAGS is a list of flags
$GC train --dataset "$DATA/tokens.bin" --model_dir "$RUN" --preset "$PRESET" --steps "$STEPS" --device "$DEVICE" \
    $TRAIN_FLAGS "${resume[@]}"

echo "== 3/3 generate"
for prompt in "def reverse_string(" "import os
" "class Stack:
    def push(self"; do
  echo "--- prompt: $prompt"
  $GC generate --model_dir "$RUN" --prompt "$prompt" --max_tokens 80 --temp 0.7 --top_k 40 --seed 1 --device "$DEVICE"
done
