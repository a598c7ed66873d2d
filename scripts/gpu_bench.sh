#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch: the training and attention benchmarks of BENCHMARK.md,
# side by side with PyTorch (explicit attention, SDPA + fused AdamW, torch.compile), one run each.
#   bash scripts/gpu_bench.sh [OUT_DIR]      (logs and JSON results go to OUT_DIR, default ./out/bench)
#   ONLY="gpt2 attention" bash scripts/gpu_bench.sh      (a subset: gpt2 mallmoc mallmoc_tf32 fp32
#                                                          dropout attention; and, not by default,
#                                                          tests and ncu)
# On a freshly started H100/H200, GRADCRAFT_KERNEL_CACHE pointing at what scripts/prebuild_kernels.py
# built elsewhere skips the minutes of compiling the Hopper attention kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-out/bench}
mkdir -p "$OUT_DIR"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
ONLY=${ONLY:-gpt2 mallmoc mallmoc_tf32 fp32 dropout attention}
want() { [[ " $ONLY " == *" $1 "* ]]; }
run() {  # name, then the command; the table (the last lines) is printed, the whole log kept
    local name=$1; shift
    echo "== $name: $*"
    # (LIMIT seconds, 420 by default; killed outright 10 s after: a hung kernel ignores SIGTERM)
    timeout -k 10 "${LIMIT:-420}" "$@" > "$OUT_DIR/$name.log" 2>&1
    local status=$?
    grep -v "^\s*$" "$OUT_DIR/$name.log" | tail -12
    [ $status = 0 ] || echo "!! $name exited with $status"
}
# tests (only when asked, and first): the attention kernels' GPU tests, every variant included; a test
# still running after 120 s ends the run with its stack (GRADCRAFT_TEST_TIMEOUT, tests/conftest.py), and
# the whole step after 600 s, so that a kernel that hangs cannot take the machine's session with it
want tests && GRADCRAFT_TEST_TIMEOUT=120 LIMIT=600 run attention_tests $PY -m pytest --maxfail=20 -q \
    -p no:cacheprovider tests/test_cuda_attention.py tests/test_attention_dropout.py tests/test_cuda_graph.py \
    tests/test_packed_launch.py -k "flash or hopper or attention or sdpa or dropout or graph or deterministic or packed"
T="$PY bench/train_gpt.py --device cuda --graph --steps 10 --warmup 3 --json $OUT_DIR/train.json"
want gpt2 && run gpt2 $T --label "gpt2-124m bf16" --preset gpt2-124m --batch 16 --seq 1024 --bf16 --baseline sdpa,compile
want mallmoc && run mallmoc $T --label "mallmoc bf16" --preset mallmoc --batch 16 --seq 512 --bf16 --baseline sdpa,compile
want dropout && run dropout $T --label "6x384 dropout 0.2 bf16" --preset gpt2-124m --batch 64 --seq 256 --bf16 \
    --set n_layers=6 --set dim=384 --set n_heads=6 --set vocab_size=256 --set dropout=0.2 --baseline sdpa,compile
want mallmoc_tf32 && run mallmoc_tf32 $T --label "mallmoc TF32" --preset mallmoc --batch 16 --seq 512 --tf32 --baseline sdpa
want fp32 && run fp32 $T --label "mallmoc fp32" --preset mallmoc --batch 16 --seq 512 --baseline eager
# attention: wall clock against SDPA, each side's kernels (CUPTI) and host phases; then every kernel variant
# (--repeat 10 --rounds 5 --gpu_time is the sweep BENCHMARK.md reports)
want attention && run attention $PY bench/attention.py --repeat 10 --rounds 5 --gpu_time --phases
want attention && run attention_kernels $PY bench/attention_kernels.py --repeat 10
want attention && run attention_host $PY bench/attention_host.py  # (our host time per call, piece by piece)
# ncu (diagnostics, only when asked): Nsight Compute's hardware counters for our main attention kernels
# and cuDNN's (SDPA's) at a short and a long sequence, one call of each: where each spends its time
# (tensor pipe, issue slots, warp stalls, memory). --clock-control none leaves the clocks alone.
NCU_KERNELS='regex:hopper_fwd|hopper_bwd_fused|hopper_bwd_ws|sdpa_sm90_flash'
for case in "1024 128" "8192 64"; do
    set -- $case
    want ncu && run "ncu_t$1_d$2" ncu --clock-control none -k "$NCU_KERNELS" -c 4 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section Occupancy $PY bench/attention.py --seqs "$1" --dims "$2" --extra_seq 0 --repeat 1 --rounds 1
done
true
