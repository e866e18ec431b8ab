#!/usr/bin/env bash
# One batch of GPU work on the device machine, logs under $OUT (or ./out). Usage:
#   bash scripts/gpu_session.sh STEP...
# steps: env tests numerics crosscheck census sanitize torch hunt deep-numpy deep-cuda bench perf flakes pack
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
step() { echo "=== $1 ($(date -u +%H:%M:%S))"; }
for s in "$@"; do
  case $s in
    env) step env
      { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
        nvcc --version | tail -1;
        python3 -c 'import sys,numpy,cupy,hypothesis,mpmath,torch; print("python",sys.version.split()[0],"numpy",numpy.__version__,"cupy",cupy.__version__,"hypothesis",hypothesis.__version__,"mpmath",mpmath.__version__,"torch",torch.__version__)';
        normprops kernels; } 2>&1 | tee "$OUT/env.txt" ;;
    tests) step tests
      timeout 900 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_kernels_cu.py tests/test_regressions.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    numerics) step numerics
      timeout 900 python3 -m pytest -q -p no:cacheprovider -m numerics -n 16 --hypothesis-profile ci \
        --normprops-backend cuda --normprops-backend torch-cuda --normprops-backend torch-cpu \
        --normprops-fixtures-dir "$OUT/fixtures" 2>&1 | tee "$OUT/numerics_gpu.log" | tail -60 ;;
    crosscheck) step crosscheck
      python3 -c 'from normprops.crosscheck import max_ulp_difference as m; from normprops.specs import KERNELS
for k in KERNELS:
    if k.backend == "cuda" and k.name != "softmaxRowNoBarrier": print(f"{k.name:22s} max ULP vs numpy emulation: {m(k.name)}")' 2>&1 | tee "$OUT/crosscheck.txt" ;;
    census) step census
      normprops census --backend cuda 2>&1 | tee "$OUT/census.txt" ;;
    sanitize) step sanitize
      timeout 900 python3 scripts/sanitize.py 2>"$OUT/sanitize.err" | tee "$OUT/sanitize.txt" ;;
    torch) step torch
      for b in torch-cuda torch-cpu; do
        timeout 900 normprops hunt --backend $b --seed 0 --max-examples 100 --fixtures-dir "$OUT/fixtures" \
          --json "$OUT/hunt_$b.json" 2>/dev/null | tee "$OUT/hunt_$b.txt" | sed -n '/^softmax\|^layernorm\|^rmsnorm/,/^$/p'
      done ;;
    hunt) step hunt
      timeout 900 normprops hunt --seed 0 --max-examples 100 --fixtures-dir "$OUT/fixtures" \
        --json "$OUT/hunt_cuda.json" 2>/dev/null | tee "$OUT/hunt_cuda.txt" | tail -40 ;;
    deep-numpy) step deep-numpy
      timeout 1800 python3 -m pytest -q -p no:cacheprovider -m numerics -n 16 --hypothesis-profile deep \
        --normprops-backend numpy 2>&1 | tee "$OUT/deep_numpy.log" | tail -40 ;;
    deep-cuda) step deep-cuda
      timeout 1800 python3 -m pytest -q -p no:cacheprovider -m numerics -n 16 --hypothesis-profile deep \
        --normprops-backend cuda --normprops-stress-rows "${STRESS_ROWS:-2048}" 2>&1 \
        | tee "$OUT/deep_cuda.log" | tail -40 ;;
    bench) step bench
      timeout 900 normprops bench --json "$OUT/bench.json" --csv "$OUT/bench.csv" --png "$OUT/bench.png" \
        2>&1 | tee "$OUT/bench.txt" | tail -60 ;;
    perf) step perf
      timeout 900 python3 -m pytest -q -p no:cacheprovider -m perf -rs --benchmark-json "$OUT/perf.json" \
        2>&1 | tee "$OUT/perf.log" | tail -15 ;;
    flakes) step "flakes (20 runs of pytest -m perf)"
      fails=0; for i in $(seq 20); do
        timeout 300 python3 -m pytest -q -p no:cacheprovider -m perf >"$OUT/perf_run_$i.log" 2>&1 || fails=$((fails + 1))
      done; echo "false failures: $fails of 20" | tee "$OUT/flakes.txt" ;;
    pack) step pack
      tar -C "$OUT" -czf "$OUT/fixtures.tgz" fixtures 2>/dev/null && rm -rf "$OUT/fixtures"; ls -la "$OUT" ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
