#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: check the CUDA backend end to end and print a short table last.
#   bash scripts/gpu_check.sh            (uses python3 from PATH; PYTHON=... to choose another)
# Installs what is missing (pytest, CuPy for the local CUDA major version, ml_dtypes), runs the
# NVRTC compile test, the CUDA tests (against the CPU backend; data parallel on 2+ GPUs), then bench/kernels.py.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU"; exit 1; }
$PY -c "import cupy, numpy, ml_dtypes, pytest" 2>/dev/null || {
    major=$(nvidia-smi | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p')
    $PY -m pip install -q "cupy-cuda${major:-12}x" ml_dtypes pytest || exit 1
}
$PY -c "import cupy, numpy, ml_dtypes; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'ml_dtypes', ml_dtypes.__version__)"
$PY -m pytest -q -p no:cacheprovider tests/test_cuda_compile.py 2>&1 | tail -2; compile=${PIPESTATUS[0]}
$PY -m pytest -q -p no:cacheprovider --maxfail=300 --tb=short -rf tests/test_cuda.py tests/test_cuda_rows.py \
    tests/test_cuda_attention.py tests/test_cuda_linear.py tests/test_cuda_graph.py tests/test_kv_cache.py \
    tests/test_cuda_distributed.py tests/test_cuda_layers.py tests/test_fusion.py tests/test_compile.py tests/test_compile_step.py \
    tests/test_autocast.py tests/test_grad_scaler.py tests/test_sampling_penalties.py 2>&1 | tee /tmp/gpu_check_tests.log | tail -40  # (distributed: skipped below 2 GPUs)
tests=${PIPESTATUS[0]}
$PY bench/kernels.py --dtype float32 2>&1 | tee /tmp/gpu_check_bench.log | tail -20
$PY bench/kernels.py --dtype bfloat16 2>&1 | tail -18
echo
echo "compile test exit $compile | cuda tests: $(tail -1 /tmp/gpu_check_tests.log) (exit $tests)"
[ "$compile" = 0 ] && [ "$tests" = 0 ]
