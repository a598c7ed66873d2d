#!/usr/bin/env bash
# On a GPU machine: train the mallmoc preset on the Python standard library for a few hundred steps
# on the GPU, and the first steps of the same run (same seed, same data) on the CPU; print both.
#   bash scripts/gpu_train_check.sh [STEPS]        (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src
STEPS=${1:-300}
OUT=${OUT_DIR:-/tmp/gc_gpu_check}
STDLIB=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
GC="$PY -m gradcraft.cli.main"
$GC tokenize --data_dir "$STDLIB" --ext .py --exclude site-packages --output_path "$OUT/data/tokens.bin" \
    --vocab_size 8192 --sample_mb 20 --val_fraction 0.01 2>&1 | tail -3
COMMON=(--dataset "$OUT/data/tokens.bin" --preset mallmoc --batch_size 16 --steps "$STEPS" --max_lr 6e-4
        --min_lr 6e-5 --warmup_steps 30 --seed 0 --no_progress --print_every 50)
$GC train "${COMMON[@]}" --model_dir "$OUT/gpu" --device cuda --checkpoint_every "$STEPS" --eval_every 100 2>&1 | tail -9
$GC train "${COMMON[@]}" --model_dir "$OUT/cpu" --device cpu --stop_after 2 --checkpoint_every 1000 2>&1 | tail -2
$PY - "$OUT" <<'PY'
import sys
from gradcraft.training.log import read_log
gpu, cpu = (read_log(f"{sys.argv[1]}/{d}/training_log.csv") for d in ("gpu", "cpu"))
print("step  cpu loss    gpu loss    |diff|")
for a, b in zip(cpu, gpu):
    print(f"{a['step']:>4s}  {float(a['loss']):.6f}  {float(b['loss']):.6f}  {abs(float(a['loss']) - float(b['loss'])):.2e}")
print("gpu loss at steps 1, 100, 200, last:", *(f"{float(gpu[i]['loss']):.3f}" for i in (0, 99, 199, -1)))
print("gpu validation loss:", [r["val_loss"][:6] for r in gpu if r["val_loss"]])
PY
