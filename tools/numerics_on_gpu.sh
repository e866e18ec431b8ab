#!/usr/bin/env bash
# The numerics suite on a GPU host, as docs/registry.md times it: every compiler's cache in one
# folder (kept between runs if the folder is), the CUDA sources compiled in the background while
# the first tests run, junit XML, the log and a fixture of each failure written, then each slow-start
# pool's workers (planned and actual, conftest.py) and the time summed by backend with the workers
# that ran it (and by registry entry, into by-kernel.txt).
#
#   tools/numerics_on_gpu.sh [OUT_DIR] [extra pytest arguments...]   (OUT_DIR default ./numerics-run)
#
# env: CACHE_DIR (default ~/.cache/normprops-suite), WORKERS (default: cores - 1), PROFILE (dev).
set -uo pipefail
out=${1:-numerics-run}; shift || true
mkdir -p "$out" && out=$(cd "$out" && pwd)
tools=$(cd "$(dirname "$0")" && pwd)
cd "$tools/.."  # the repository root: its tests and conftest.py
cache=${CACHE_DIR:-$HOME/.cache/normprops-suite}
export JAX_COMPILATION_CACHE_DIR=$cache/jax JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
       JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 NORMPROPS_KERNEL_CACHE=$cache/kernel \
       TRITON_CACHE_DIR=$cache/triton TORCHINDUCTOR_CACHE_DIR=$cache/inductor
workers=${WORKERS:-$(( $(nproc) - 1 ))}
# One process per source and build: each image compiles under its own lock, and a test that needs
# one waits for it rather than compiling it again.
units=$(python -c "from normprops.cuda.build import BUILDS
from normprops.cuda.prod import KEPT_BAD_SOURCE, SOURCE
print(*[f'kernels.cu {b}' for b in BUILDS], f'{SOURCE} default', f'{KEPT_BAD_SOURCE} default', sep='\n')")
while read -r src build; do
  python -c "from normprops.cuda.build import module; module('$build', source='$src')" \
    > "$out/compile-$src-$build.log" 2>&1 &
done <<< "$units"
start=$(date +%s)
python -m pytest -m numerics -n "$workers" --hypothesis-profile "${PROFILE:-dev}" -p no:cacheprovider \
  --junitxml="$out/junit.xml" --normprops-fixtures-dir="$out/fixtures" "$@" > "$out/numerics.log" 2>&1
status=$?
echo "pytest exit $status after $(( $(date +%s) - start )) s; $(tail -n 1 "$out/numerics.log")"
grep -E "^(FAILED|ERROR)" "$out/numerics.log"
grep -E "^workers per pool" "$out/numerics.log"
python "$tools/suite_by_backend.py" "$out/junit.xml"
python "$tools/suite_by_backend.py" --by-kernel "$out/junit.xml" > "$out/by-kernel.txt"
exit $status
