#!/usr/bin/env bash
# One batch of GPU work on the device machine, logs under $OUT (or ./out). Usage:
#   bash scripts/gpu_session.sh STEP...
# steps: env ftz tests numerics crosscheck census sanitize torch hunt deep-numpy deep-cuda bench
#        bench-model frameworks ecosystem sweep profile perf flakes pack
# Environment: WORKERS (xdist workers, default 16), BACKENDS (numerics' backends, default "cuda
# cuda-prod cuda-cluster torch-cuda torch-cpu"), STRESS_ROWS (deep-cuda's stress batch, default 2048; 0 is off),
# DEEP_BACKEND (default cuda), DEEP_K (a -k expression for deep-cuda), FLAKE_RUNS (default 20),
# SWEEP_ARGS (e.g. "--per-thread 32,32p,64p --dtypes bfloat16"), PROFILE ("op:dtype:cols ...",
# Nsight Compute on scripts/launch_once.py, default "layernorm:bfloat16:16384"), BENCH_ARGS (more
# arguments for bench-model, e.g. "--peers liger", "--rounds 5" or "--only x151936" to split a
# run). Several invocations may run at once on different GPUs (CUDA_VISIBLE_DEVICES); the install
# happens once.
# Peer libraries (Liger-Kernel, QuACK): wheels carried under .whl (scripts/peers_install.sh says
# how) are unpacked into /root/peers-site before the steps, and that folder is put on PYTHONPATH
# whenever it exists, so a later call needs to carry nothing while the machine stays warm.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
WORKERS=${WORKERS:-16}
( flock 9; command -v normprops >/dev/null ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 ) 9>/tmp/normprops-install.lock
command -v normprops >/dev/null || { cat "$OUT/install.log"; exit 1; }
if compgen -G ".whl/*.whl" >/dev/null || compgen -G ".whl/quack-split/call-*" >/dev/null; then
  ( flock 9; bash scripts/peers_install.sh install .whl >"$OUT/peers_install.log" 2>&1 ) 9>/tmp/normprops-peers.lock \
    || { cat "$OUT/peers_install.log"; exit 1; }
  grep -v '^staged ' "$OUT/peers_install.log"
fi
# shellcheck disable=SC1091
[ -f /root/peers-site/env.sh ] && . /root/peers-site/env.sh
step() { echo "=== $1 ($(date -u +%H:%M:%S))"; }
for s in "$@"; do
  case $s in
    env) step env
      { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
        nvcc --version | tail -1;
        python3 -c 'import sys,numpy,cupy,hypothesis,mpmath,torch; print("python",sys.version.split()[0],"numpy",numpy.__version__,"cupy",cupy.__version__,"hypothesis",hypothesis.__version__,"mpmath",mpmath.__version__,"torch",torch.__version__)';
        normprops kernels;
        python3 -c 'from normprops.backends.peers import LIBRARIES, peer_status
for lib in LIBRARIES: print("peer", lib, *peer_status(lib))'; } 2>&1 | tee "$OUT/env.txt" ;;
    ftz) step ftz  # does our default build keep subnormals (CuPy's RawModule appended -ftz=true)?
      python3 -c 'from normprops.cuda.build import build_flushes as f
print("default build flushes subnormals:", f("default"), "| ftz build:", f("ftz"))' 2>&1 | tee "$OUT/ftz.txt"
      [ -f .gpu/ftz_probe.py ] && python3 .gpu/ftz_probe.py >>"$OUT/ftz.txt" 2>&1; tail -25 "$OUT/ftz.txt" ;;
    frameworks) step frameworks  # users' kernels in torch (bfloat16, CUDA) through --framework
      for op in rmsnorm softmax layernorm; do fn=$(case $op in rmsnorm) echo rms_norm;; layernorm) echo layer_norm;; *) echo $op;; esac)
        timeout 600 normprops hunt --op $op --impl normprops.examples.frameworks:torch_$fn --framework torch \
          --dtype bfloat16 --seed 0 --max-examples "${EXAMPLES:-100}" --fixtures-dir "$OUT/fixtures" \
          --json "$OUT/user_torch_${op}_bf16.json" >"$OUT/user_torch_${op}_bf16.txt" 2>&1
        echo "exit $?"; grep -E "^  [a-z_]+ |^softmax|^rmsnorm|^layernorm|stopped|clean|failed" "$OUT/user_torch_${op}_bf16.txt" | head -20
      done ;;
    ecosystem) step ecosystem  # other projects' kernels, sharded over processes, merged into one matrix
      # ECO_GROUPS: "BACKENDS:SHARDS:EXAMPLES ..." run side by side (QuACK compiles per width: fewer examples)
      mkdir -p "$OUT/eco"; export TORCHINDUCTOR_COMPILE_THREADS=1
      for group in ${ECO_GROUPS:-torch-compile,liger,jax,flax:12:${EXAMPLES:-100} quack:4:${QUACK_EXAMPLES:-20}}; do
        IFS=: read -r eco n ex <<<"$group"
        for k in $(seq 1 "$n"); do
          timeout -s INT "${ECO_TIMEOUT:-400}" normprops hunt --backend "$eco" --shard "$k/$n" --seed 0 \
            --max-examples "$ex" --fixtures-dir "$OUT/fixtures" --json "$OUT/eco/${eco%%,*}_$k.json" \
            >"$OUT/eco/${eco%%,*}_$k.txt" 2>&1 &
        done
      done; wait
      normprops report merge "$OUT"/eco/*.json --allow-incomplete --json "$OUT/ecosystem.json" --png "$OUT/ecosystem.png" \
        2>&1 | tee "$OUT/ecosystem.txt" | tail -80 ;;
    tests) step tests
      timeout 900 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_prod.py \
        tests/test_kernels_cu.py tests/test_regressions.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    numerics) step numerics
      backends=(); for b in ${BACKENDS:-cuda cuda-prod cuda-cluster torch-cuda torch-cpu}; do backends+=(--normprops-backend "$b"); done
      timeout "${NUMERICS_TIMEOUT:-900}" python3 -m pytest -q -p no:cacheprovider -m numerics -n "$WORKERS" \
        --hypothesis-profile ci "${backends[@]}" --normprops-fixtures-dir "$OUT/fixtures" 2>&1 \
        | tee "$OUT/numerics_gpu.log" | tail -70 ;;
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
      timeout 1800 python3 -m pytest -q -p no:cacheprovider -m numerics -n "$WORKERS" --hypothesis-profile deep \
        --normprops-backend numpy 2>&1 | tee "$OUT/deep_numpy.log" | tail -40 ;;
    deep-cuda) step deep-cuda
      timeout "${DEEP_TIMEOUT:-1800}" python3 -m pytest -v -p no:cacheprovider -m numerics -n "$WORKERS" \
        --hypothesis-profile deep -k "${DEEP_K:-${DEEP_BACKEND:-cuda}}" --normprops-backend "${DEEP_BACKEND:-cuda}" \
        --normprops-stress-rows "${STRESS_ROWS:-2048}" 2>&1 | tee "$OUT/deep_cuda.log" \
        | grep -v '^\[gw' | tail -40 ;;
    bench) step bench
      timeout 900 normprops bench --json "$OUT/bench.json" --csv "$OUT/bench.csv" --png "$OUT/bench.png" \
        2>&1 | tee "$OUT/bench.txt" | tail -60 ;;
    bench-model) step bench-model  # model-shaped cases against PyTorch, Liger and QuACK, graphs at decode
      timeout "${BENCH_TIMEOUT:-540}" normprops bench --cases model --graphs ${BENCH_ARGS:-} \
        --json "$OUT/bench_model.json" --csv "$OUT/bench_model.csv" --lead-csv "$OUT/lead_model.csv" \
        --lead-png "$OUT/lead_model.png" >"$OUT/bench_model.txt" 2>"$OUT/bench_model.err"
      rc=$?
      sed -n '/^the lead/,$p' "$OUT/bench_model.txt" | grep -v '^  met ' | head -300
      [ $rc -eq 0 ] || { echo "bench-model: exit $rc"; tail -5 "$OUT/bench_model.err"; } ;;
    sweep) step sweep
      timeout 600 python3 scripts/sweep_prod.py ${SWEEP_ARGS:-} --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.txt" | tail -80 ;;
    profile) step profile
      ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      for c in ${PROFILE:-layernorm:bfloat16:16384}; do IFS=: read -r op dt cols <<<"$c"
        timeout 300 "${ncu:-ncu}" --clock-control none --launch-skip 1 --launch-count 1 -k "regex:^${op}_" \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
          --section WarpStateStats --section MemoryWorkloadAnalysis \
          --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
          python3 scripts/launch_once.py --op "$op" --dtype "$dt" --cols "$cols" >"$OUT/ncu_${op}_${dt}_${cols}.txt" 2>&1
        grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issued Ipc|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Eligible Warps|stalled" \
          "$OUT/ncu_${op}_${dt}_${cols}.txt" | awk '!/stalled/ || $NF > 0.05' | sed "s/^/$op $dt $cols: /" | head -40
      done ;;
    perf) step perf
      timeout 900 python3 -m pytest -q -p no:cacheprovider -m perf -rs --benchmark-json "$OUT/perf.json" \
        2>&1 | tee "$OUT/perf.log" | tail -15 ;;
    flakes) step "flakes (20 runs of pytest -m perf)"
      fails=0; mkdir -p "$OUT/flakes"; : >"$OUT/flakes.txt"; for i in $(seq "${FLAKE_RUNS:-20}"); do
        if timeout 300 python3 -m pytest -q -p no:cacheprovider -m perf -s --benchmark-disable \
          >"$OUT/flakes/run_$i.log" 2>&1; then echo "run $i: passed" >>"$OUT/flakes.txt"
        else fails=$((fails + 1)); echo "run $i: FAILED" >>"$OUT/flakes.txt"; fi
        grep -h 'gate ratio' "$OUT/flakes/run_$i.log" | sed "s/^/run $i: /" >>"$OUT/flakes.txt"
      done; echo "false failures: $fails of ${FLAKE_RUNS:-20}" | tee -a "$OUT/flakes.txt"; tail -12 "$OUT/flakes.txt" ;;
    pack) step pack  # at most 8 files come back: everything goes into one archive
      ls -R "$OUT" | head -50; tar -C "$OUT" -czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/" ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
