set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_cuda.py -k "hopper or flash or argmax" 2>&1 | tail -4
timeout 120 python3 bench/decode_profile.py --preset gpt2-124m --vocab 50257 --dtype bfloat16 --cupti --top 45 2>&1 | grep -v Warn | tee $OUT/decode_profile_gpt2.log
timeout 100 python3 bench/generate.py --preset gpt2-124m --vocab 50257 --dtype bfloat16 --device cuda --new_tokens 256 --batches 1 2>&1 | tail -3 | tee $OUT/gen_gpt2.log
ONLY="mallmoc_tf32 fp32" bash scripts/gpu_bench.sh $OUT/bench
