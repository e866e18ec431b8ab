#!/usr/bin/env bash
# prod.cu's A/B candidates on a GPU host, each against the product build in the same rounds and
# beside the peers that import there (PyTorch, Liger-Kernel, QuACK): the vocabulary softmax's
# exchange (NP_CLUSTER_PUSH), its 16-bit rows held as floats (NP_CLUSTER_HELD16) and its cluster
# sizes (ctas=N, cluster), each checked against a float64 softmax; the norms off the 16-byte grid
# (NP_SHIFTED_WIDE), first bit for bit against the product on every op and width of
# tools/ab_bits.py, then timed at 4097 and 5121 columns; the norms' decode kernels holding 16-bit
# rows as floats (NP_DECODE_HELD), reducing with one barrier (NP_DECODE_FLAT) or with the scaled
# pass out of line (NP_DECODE_COLD), each bit for bit
# against the prefill kernels, and their split (split=N) at the model widths and 1-256 rows; Nsight
# Compute on one decode row of RMS norm, ours (and NP_DECODE_COLD's) and Liger's; and
# compute-sanitizer's racecheck and memcheck on the candidate kernels at one row and a few.
#
#   tools/candidates_on_gpu.sh [OUT_DIR]     (OUT_DIR default ./candidates-run)
#
# env: CACHE_DIR (compiled kernels, default ~/.cache/normprops-suite; keep it between runs),
# PYTHON (default python3), PEERS (default torch,liger,quack), STEPS (the steps to run, e.g.
# "vocab-bf16 vocab-f32": a run too long for one sitting split in parts; default all). Exit 0 when every step ran clean; 1 when a candidate's
# softmax was clearly worse than the product's, its bits differed, or a sanitizer reported.
set -uo pipefail
out=${1:-candidates-run}
mkdir -p "$out" && out=$(cd "$out" && pwd)
tools=$(cd "$(dirname "$0")" && pwd)
cd "$tools/.."
export NORMPROPS_KERNEL_CACHE=${CACHE_DIR:-$HOME/.cache/normprops-suite}/kernel PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
peers=${PEERS:-torch,liger,quack}
status=0
step() {  # step NAME COMMAND...: its output in OUT_DIR/NAME.txt, its time and exit status here
  local name=$1; shift
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
  local start; start=$(date +%s)
  "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(( $(date +%s) - start )) s"
  [ "$rc" -eq 0 ] || status=1
}
rows=1,8,64,256,gib
# Every build the steps take, compiled side by side first (one process each; cached in CACHE_DIR)
start=$(date +%s)
for macros in "" NP_CLUSTER_PUSH NP_CLUSTER_HELD16 NP_CLUSTER_PUSH,NP_CLUSTER_HELD16 NP_SHIFTED_WIDE NP_DECODE_HELD \
              NP_DECODE_FLAT NP_DECODE_FLAT,NP_DECODE_HELD NP_DECODE_COLD NP_DECODE_COLD,NP_DECODE_FLAT,NP_DECODE_HELD; do
  for source in prod.cu prod_decode.cu; do
    (cd tools && "$py" -c "import sys; from sweep_prod import _variant_module
_variant_module(tuple(m for m in sys.argv[1].split(',') if m), sys.argv[2])" "$macros" "$source") \
      > "$out/compile-${macros:-base}-$source.log" 2>&1 &
  done
done
wait
echo "compiled in $(( $(date +%s) - start )) s"
step vocab-bf16 "$py" tools/sweep_prod.py --ops softmax --per-thread 64p --dtypes bfloat16 \
  --widths 32000,128256,151936 --rows "$rows" --peers "$peers" --check --json "$out/vocab-bf16.json" \
  --variants base,NP_CLUSTER_PUSH,NP_CLUSTER_HELD16,NP_CLUSTER_PUSH+NP_CLUSTER_HELD16,NP_CLUSTER_PUSH+NP_CLUSTER_HELD16+ctas=16,NP_CLUSTER_PUSH+ctas=16,cluster+ctas=2,NP_CLUSTER_PUSH+NP_CLUSTER_HELD16+cluster+ctas=2
step vocab-f32 "$py" tools/sweep_prod.py --ops softmax --per-thread 32 --dtypes float32 \
  --widths 32000,128256,151936 --rows "$rows" --peers "$peers" --check --json "$out/vocab-f32.json" \
  --variants base,NP_CLUSTER_PUSH,NP_CLUSTER_PUSH+ctas=16,NP_CLUSTER_PUSH+ctas=4
step bits-shifted-wide "$py" tools/ab_bits.py --define NP_SHIFTED_WIDE
step bits-decode-held "$py" tools/ab_bits.py --define NP_DECODE_HELD --spread
step bits-decode-flat "$py" tools/ab_bits.py --define NP_DECODE_FLAT --define NP_DECODE_HELD --spread
step bits-decode-cold "$py" tools/ab_bits.py --define NP_DECODE_COLD --spread
step odd-norms "$py" tools/sweep_prod.py --ops layernorm,rmsnorm --per-thread 64p --dtypes bfloat16 \
  --widths 4097,5121 --rows "$rows" --spread --peers "$peers" --json "$out/odd-norms.json" \
  --variants base,NP_SHIFTED_WIDE
step odd-fused "$py" tools/sweep_prod.py --ops addrmsnorm --per-thread 32p --dtypes bfloat16 \
  --widths 4097,5121 --rows "$rows" --spread --peers "$peers" --json "$out/odd-fused.json" \
  --variants base,NP_SHIFTED_WIDE
step decode-splits "$py" tools/sweep_prod.py --ops layernorm,rmsnorm --per-thread 64p --dtypes bfloat16 \
  --widths 2048,2880,4096,5120,7168,8192 --rows 1,8,64,256 --spread --peers "$peers" \
  --json "$out/decode-splits.json" \
  --variants base,NP_DECODE_HELD,NP_DECODE_FLAT,NP_DECODE_FLAT+NP_DECODE_HELD,NP_DECODE_COLD,NP_DECODE_COLD+NP_DECODE_FLAT+NP_DECODE_HELD,split=1,split=2,split=4,split=8,NP_DECODE_HELD+split=4,NP_DECODE_HELD+split=8,NP_DECODE_FLAT+NP_DECODE_HELD+split=4,NP_DECODE_COLD+split=4
step decode-splits-fused "$py" tools/sweep_prod.py --ops addrmsnorm --per-thread 32p --dtypes bfloat16 \
  --widths 2048,2880,4096,5120,7168,8192 --rows 1,8,64,256 --spread --peers "$peers" \
  --json "$out/decode-splits-fused.json" \
  --variants base,NP_DECODE_HELD,NP_DECODE_FLAT,NP_DECODE_FLAT+NP_DECODE_HELD,NP_DECODE_COLD,NP_DECODE_COLD+NP_DECODE_FLAT+NP_DECODE_HELD,split=1,split=2,split=4,NP_DECODE_HELD+split=4
# Where a decode row's time goes: Nsight Compute on one warm launch, ours and the fastest norm peer's
profiler=$(command -v ncu)
if [ -n "$profiler" ]; then
  for cols in 2048 4096 8192; do
    step "profile-rmsnorm-$cols" "$profiler" --clock-control none --launch-skip 1 --launch-count 1 -k "regex:rms_?norm" \
      --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SchedulerStats \
      "$py" tools/launch_once.py --op rmsnorm --dtype bfloat16 --cols "$cols" --rows 1 --spread
    step "profile-rmsnorm-$cols-cold" "$profiler" --clock-control none --launch-skip 1 --launch-count 1 -k "regex:rms_?norm" \
      --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SchedulerStats \
      "$py" tools/launch_once.py --op rmsnorm --dtype bfloat16 --cols "$cols" --rows 1 --spread --define NP_DECODE_COLD
    step "profile-rmsnorm-$cols-liger" "$profiler" --clock-control none --launch-skip 1 --launch-count 1 -k "regex:rms_?norm" \
      --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SchedulerStats \
      "$py" tools/launch_once.py --op rmsnorm --dtype bfloat16 --cols "$cols" --rows 1 --peer liger
  done
elif [ -z "${STEPS:-}" ] || [[ "$STEPS" == *profile* ]]; then
  echo "ncu not on PATH: the profile steps did not run"
fi
sanitizer=$(command -v compute-sanitizer)
if [ -n "$sanitizer" ]; then
  for tool in racecheck memcheck; do
    step "sanitize-$tool-vocab" "$sanitizer" --tool "$tool" --error-exitcode 1 "$py" tools/sweep_prod.py \
      --ops softmax --per-thread 64p,32 --dtypes bfloat16,float32 --widths 151936,32000 --rows 1,3 \
      --rounds 3 --variants NP_CLUSTER_PUSH,NP_CLUSTER_PUSH+NP_CLUSTER_HELD16,NP_CLUSTER_PUSH+ctas=16
    step "sanitize-$tool-norms" "$sanitizer" --tool "$tool" --error-exitcode 1 "$py" tools/sweep_prod.py \
      --ops layernorm,rmsnorm,addrmsnorm --per-thread 32p,64p --dtypes bfloat16 --widths 4097,5121,1025,4096 \
      --rows 1,3 --spread --rounds 3 --variants NP_SHIFTED_WIDE,NP_DECODE_HELD,NP_DECODE_FLAT+NP_DECODE_HELD,NP_DECODE_COLD
  done
elif [ -z "${STEPS:-}" ] || [[ "$STEPS" == *sanitize* ]]; then
  echo "compute-sanitizer not on PATH: the sanitizer steps did not run"
  status=1
fi
exit $status
