#!/usr/bin/env bash
# docs/ecosystem.md's matrix on a GPU host: the ecosystem backends usable there, hunted at EXAMPLES
# examples a cell for every seed in SEEDS. Each seed runs as SHARDS registry hunts side by side
# (`hunt --shard K/N`, every backend's cells dealt round robin), all seeds at once, the compilers'
# caches shared. Then each seed's shards are merged into one report and matrix, and the seeds are
# compared cell by cell (tools/seed_matrix.py).
#
#   tools/ecosystem_on_gpu.sh [OUT_DIR]        (OUT_DIR default ./ecosystem-run)
#
# env: BACKENDS (default torch-compile,liger,quack,jax,flax; one not usable is noted and skipped),
#      SEEDS (default "1 2"), EXAMPLES (default 300), SHARDS (hunts a seed; default the cores
#      shared out over the seeds), BUDGET (each hunt's --time-budget in seconds; unset: none),
#      CACHE_DIR (default ~/.cache/normprops-suite, as tools/numerics_on_gpu.sh).
# Run it again with the same OUT_DIR and the same settings to go on: each hunt resumes from its own
# report (--resume), taking over the cells it finished and hunting the rest (only BUDGET may
# change; a hunt of other settings refuses its report, exit 2). Exit status: 0 when every hunt
# behaved as its registry declares and every merge was whole, 1 when a kernel did not, 2 when a
# hunt or a merge could not run (its log says why), 5 when a hunt's BUDGET was spent before its
# first example (run it again: it resumes).
set -uo pipefail
out=${1:-ecosystem-run}
mkdir -p "$out" && out=$(cd "$out" && pwd)
tools=$(cd "$(dirname "$0")" && pwd)
cache=${CACHE_DIR:-$HOME/.cache/normprops-suite}
export JAX_COMPILATION_CACHE_DIR=$cache/jax JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
       JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 NORMPROPS_KERNEL_CACHE=$cache/kernel \
       TRITON_CACHE_DIR=$cache/triton TORCHINDUCTOR_CACHE_DIR=$cache/inductor \
       QUACK_CACHE_DIR=${QUACK_CACHE_DIR:-$cache/quack}
backends=${BACKENDS:-torch-compile,liger,quack,jax,flax}
seeds=(${SEEDS:-1 2})
examples=${EXAMPLES:-300}
shards=${SHARDS:-$(( $(nproc) / ${#seeds[@]} > 0 ? $(nproc) / ${#seeds[@]} : 1 ))}
budget=()
[ -n "${BUDGET:-}" ] && budget=(--time-budget "$BUDGET")
# Each hunt's thread pools sized to its share of the cores, as the pytest plugin sizes xdist
# workers': otherwise every process starts one OpenMP thread per core (a value set here is kept).
hunts=$(( ${#seeds[@]} * shards ))
share=$(( $(nproc) / hunts > 0 ? $(nproc) / hunts : 1 ))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$share} MKL_NUM_THREADS=${MKL_NUM_THREADS:-$share}

start=$(date +%s)
for s in "${seeds[@]}"; do
  for k in $(seq 1 "$shards"); do
    report=$out/eco-s$s-$k.json
    resume=()
    [ -f "$report" ] && resume=(--resume "$report")
    python -m normprops hunt --backend "$backends" --seed "$s" --max-examples "$examples" \
      --shard "$k/$shards" --no-fixtures "${budget[@]}" "${resume[@]}" --json "$report" \
      >> "$out/eco-s$s-$k.log" 2>&1 &
  done
done
not_declared=0 broken=0 starved=0
for job in $(jobs -p); do
  wait "$job"
  case $? in
    0) ;;
    1) not_declared=$(( not_declared + 1 )) ;;
    5) starved=$(( starved + 1 )) ;;  # BUDGET spent before the first example: run again to resume
    *) broken=$(( broken + 1 )) ;;
  esac
done
echo "$hunts hunts in $(( $(date +%s) - start )) s: $not_declared with a kernel" \
     "not as declared, $starved that judged nothing in BUDGET, $broken that could not run" \
     "(the logs are $out/eco-s*-*.log)"

plot=0
python -c "import matplotlib" 2>/dev/null && plot=1  # the matrix drawn too, where [plot] is installed
reports=()  # this run's shards only: a folder may hold reports of an earlier run's other shards
for s in "${seeds[@]}"; do
  mine=()
  for k in $(seq 1 "$shards"); do mine+=("$out/eco-s$s-$k.json"); done
  reports+=("${mine[@]}")
  png=()
  [ "$plot" = 1 ] && png=(--png "$out/ecosystem-s$s.png")
  python -m normprops report merge "${mine[@]}" --json "$out/ecosystem-s$s.json" \
    "${png[@]}" > "$out/matrix-s$s.txt" 2>&1
  merged=$?
  echo "seed $s: merge exit $merged ($out/matrix-s$s.txt)"
  [ "$merged" -gt 1 ] && [ "$merged" != 5 ] && broken=$(( broken + 1 ))
done
python "$tools/seed_matrix.py" --examples "$examples" "${reports[@]}" | tee "$out/seeds.txt"
[ "$broken" -gt 0 ] && exit 2
[ "$not_declared" -gt 0 ] && exit 1
[ "$starved" -gt 0 ] && exit 5
exit 0
