#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: check and time decoding and serving in one go.
#   bash scripts/gpu_decode_check.sh [OUT_DIR]      (logs go to OUT_DIR, default /tmp/gpu_decode)
# 1. the CUDA tests of the decoding path: kernels (gemv, KV-cache attention, sampling, argmax), the
#    captured decoding step and its one-step-ahead loop, the scheduler;
# 2. bench/decode_kernels.py, bench/decode_profile.py (llama-110m and gpt2-124m, bf16), bench/generate.py
#    at batch 1, 8 and 64, and bench/serve.py with 64 clients (needs fastapi and uvicorn).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-/tmp/gpu_decode}
mkdir -p "$OUT_DIR"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || { echo "no GPU"; exit 1; }
$PY -m pytest -q -p no:cacheprovider -x --tb=short -rf tests/test_sampling.py tests/test_kv_cache.py \
    tests/test_cuda_graph.py tests/test_generate.py tests/test_batching.py \
    "tests/test_cuda.py::test_sample_tokens_kernel" "tests/test_cuda.py::test_kv_cache_kernels" \
    "tests/test_cuda.py::test_kv_append_attention_kernel" \
    -k "cuda or sample or graph or kv or generat or schedul" 2>&1 | tee "$OUT_DIR/tests.log" | tail -15
tests=${PIPESTATUS[0]}
$PY -m pytest -q -p no:cacheprovider --tb=short tests/test_cuda.py tests/test_cuda_linear.py -k "matmul or argmax or gemv" 2>&1 | tail -3
timeout 120 $PY bench/decode_kernels.py 2>&1 | tee "$OUT_DIR/decode_kernels.log" | tail -30
for model in "llama-110m --vocab 32000" "gpt2-124m --vocab 50257"; do
    timeout 120 $PY bench/decode_profile.py --preset $model --dtype bfloat16 --cupti 2>&1 | grep -v Warn \
        | tee -a "$OUT_DIR/decode_profile.log" | tail -24
    timeout 240 $PY bench/generate.py --preset $model --dtype bfloat16 --device cuda --new_tokens 256 \
        --batches 1,8,64 2>&1 | tee -a "$OUT_DIR/generate.log" | tail -4
done
timeout 300 $PY bench/serve.py --preset llama-110m --device cuda --clients 64 --requests 128 --max_batch 64 \
    --max_tokens 64 --json "$OUT_DIR/serve.json" 2>&1 | tee "$OUT_DIR/serve.log" | tail -5
echo "decoding tests exit $tests"
[ "$tests" = 0 ]
