#!/usr/bin/env bash
# The peer libraries of `normprops bench` (Liger-Kernel, QuACK) for a machine with no registry.
#
#   bash scripts/peers_install.sh fetch   [DIR]   here (PyPI reachable): download the wheels into DIR
#   bash scripts/peers_install.sh pack    [DIR]   here: split the one wheel too big to travel (below)
#                                                 into DIR/quack-split/call-1, call-2 (one carry each)
#   bash scripts/peers_install.sh install [DIR]   there: stage what this call carried, and once every
#                                                 part is staged, unpack all of it into $PEERS_SITE
#   bash scripts/peers_install.sh env             there: print the PYTHONPATH line to export
#
# DIR defaults to .whl (git-ignored). The target machine has torch 2.11+cu130, triton 3.6, Python
# 3.12, cuda-bindings, einops, protobuf and typing-extensions; the wheels below are what it lacks.
# Every wheel is unpacked with `python -m zipfile -e` into one folder rather than `pip install
# --target --upgrade`, because several nvidia-cutlass-dsl wheels write into the same
# nvidia_cutlass_dsl/ folder and pip's --upgrade replaces the folder wheel by wheel. Python reads
# no .pth file from a PYTHONPATH folder, so the printed PYTHONPATH names
# nvidia_cutlass_dsl/dsl_packages itself (what nvidia_cutlass_dsl_packages.pth would have added).
#
# Sizes (liger-kernel 0.8.5, quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1):
#   wheel                                   compressed   unpacked   files
#   liger_kernel-0.8.5 (pure Python)          0.9 MB      3.5 MB     293
#   quack_kernels-0.6.5 (pure Python)         0.7 MB      2.6 MB     118
#   nvidia_cutlass_dsl-4.8.1                  0.01 MB     0.03 MB      6
#   nvidia_cutlass_dsl_libs_base-4.8.1        3.1 MB     12.1 MB     125
#   nvidia_cutlass_dsl_libs_core-4.8.1        1.6 MB      6.8 MB     208
#   nvidia_cutlass_dsl_libs_cu13-4.8.1       92.0 MB    237.1 MB      25   (12 files, the rest folders)
#   apache_tvm_ffi-0.1.15.post2               3.3 MB     11.0 MB     291
#   torch_c_dlpack_ext-0.1.5                  0.9 MB      2.2 MB      24
#   all of them unpacked: 1019 files, 266 MiB. The cu13 files as xz -9e: 63.5 MB, parts of 38.0 and
#   25.5 MB; call-1 carries 48.6 MB in 9 files, call-2 25.5 MB in 2 (MANIFEST in both).
# torch-c-dlpack-ext has prebuilt add-ons for torch <= 2.9 only; torch >= 2.10 has the DLPack
# exchange API itself and tvm-ffi uses that, so the wheel is carried only because quack requires it.
# One device call carries at most 64 MiB with the working tree, so the cu13 wheel (92 MB) travels as
# an xz archive of its unpacked files in two parts (sizes and checksums in DIR/quack-split/MANIFEST):
# call 1 carries DIR/quack-split/call-1 (part 0, the MANIFEST and the seven small wheels), call 2
# DIR/quack-split/call-2 (part 1); `install` in each call stages what came to /root, and unpacks
# once every part is there. Liger alone fits one call and needs no split:
# `pip install --no-index --no-deps --target /tmp/site .whl/liger*.whl` (or carry that wheel alone
# and run `install`).
# nvidia-cutlass-dsl declares nvidia-cutlass-dsl-libs-cu12 as a requirement; it is not carried:
# the DSL picks the toolkit flavour it finds (_cutlass_ir.cu13.*.so) and the driver runs CUDA 13.
set -euo pipefail
mode=${1:-}
DIR=${2:-.whl}
PEERS_SITE=${PEERS_SITE:-/root/peers-site}
STAGE=${PEERS_STAGE:-/root/peers-stage}
SPLIT=quack-split
PART_BYTES=${PART_BYTES:-38000000}  # < 40 MB: room for the small wheels beside part 1 in one call
PY=${PYTHON:-python3}

WHEELS=(
  liger-kernel==0.8.5
  quack-kernels==0.6.5
  nvidia-cutlass-dsl==4.8.1
  nvidia-cutlass-dsl-libs-base==4.8.1
  nvidia-cutlass-dsl-libs-core==4.8.1
  nvidia-cutlass-dsl-libs-cu13==4.8.1
  apache-tvm-ffi==0.1.15.post2
  torch-c-dlpack-ext==0.1.5
)
CU13=nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl

die() { echo "peers_install: $*" >&2; exit 1; }

# One folder per device call, each one carry path (a call takes at most 8): call-1 holds the small
# wheels, the MANIFEST and part 0; call-N part N-1 and the MANIFEST.
write_calls() {
  local parts=$1 n=0 p
  [ -f "$parts/MANIFEST" ] || die "$parts/MANIFEST is missing: run '$0 pack $DIR'"
  for p in "$parts"/cu13.tar.xz.part*; do
    n=$((n + 1)); rm -rf "$DIR/$SPLIT/call-$n.new"; mkdir -p "$DIR/$SPLIT/call-$n.new"
    cp "$p" "$parts/MANIFEST" "$DIR/$SPLIT/call-$n.new/"
    if [ $n -eq 1 ]; then
      for w in "$DIR"/*.whl; do case $w in *"$CU13") ;; *) cp "$w" "$DIR/$SPLIT/call-1.new/" ;; esac; done
    fi
  done
  for p in $(seq 1 $n); do rm -rf "$DIR/$SPLIT/call-$p"; mv "$DIR/$SPLIT/call-$p.new" "$DIR/$SPLIT/call-$p"; done
  cp "$parts/MANIFEST" "$DIR/$SPLIT/MANIFEST" 2>/dev/null || true
  cat "$DIR/$SPLIT/MANIFEST"
  for p in $(seq 1 $n); do
    echo "call $p: carry $DIR/$SPLIT/call-$p ($(du -sb "$DIR/$SPLIT/call-$p" | cut -f1) bytes, $(ls "$DIR/$SPLIT/call-$p" | wc -l) files)"
  done
}

env_line() {
  echo "export PYTHONPATH=$PEERS_SITE:$PEERS_SITE/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}"
}

case $mode in
  fetch)
    mkdir -p "$DIR"
    for w in "${WHEELS[@]}"; do
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$DIR" "$w"
    done
    ls -l "$DIR"/*.whl ;;
  pack)
    [ -f "$DIR/$CU13" ] || die "$DIR/$CU13 is missing: run '$0 fetch $DIR' first"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    "$PY" -m zipfile -e "$DIR/$CU13" "$tmp/files"
    mkdir -p "$tmp/parts"
    # xz of the unpacked files: the wheel itself is deflated already and would not shrink.
    tar -C "$tmp/files" -cf - . | xz -9e -T0 | split -b "$PART_BYTES" -d -a 1 - "$tmp/parts/cu13.tar.xz.part"
    ( cd "$tmp/parts"
      { echo "# $CU13: $(find "$tmp/files" -type f | wc -l) files, $(du -sb "$tmp/files" | cut -f1) bytes unpacked"
        echo "# parts (bytes, sha256, name); reassemble: cat cu13.tar.xz.part* | xz -d | tar -x"
        for p in cu13.tar.xz.part*; do echo "$(stat -c %s "$p") $(sha256sum "$p")"; done; } >MANIFEST )
    write_calls "$tmp/parts" ;;
  split)  # lay out the parts of an earlier pack (in DIR/quack-split) again, without recompressing
    write_calls "$DIR/$SPLIT" ;;
  install)
    mkdir -p "$STAGE"
    # Stage what this call carried (the small wheels, whichever parts travelled): /root outlives
    # the call while the machine stays warm, the carried paths may not.
    shopt -s nullglob
    for f in "$DIR"/*.whl "$DIR/$SPLIT"/call-*/*; do
      case $f in *"$CU13") continue ;; esac  # the unsplit wheel never travels
      cp -f "$f" "$STAGE/"; echo "staged $(basename "$f")"
    done
    wheels=("$STAGE"/*.whl)
    [ ${#wheels[@]} -gt 0 ] || die "nothing staged: carry $DIR/$SPLIT/call-1 (or a wheel of $DIR)"
    missing=()
    if [ -f "$STAGE/MANIFEST" ]; then
      while read -r size sum name; do
        [ -f "$STAGE/$name" ] && echo "$sum  $STAGE/$name" | sha256sum -c --quiet - >/dev/null 2>&1 || missing+=("$name")
      done < <(grep -v '^#' "$STAGE/MANIFEST")
    else
      missing+=("$SPLIT/MANIFEST")
    fi
    # Nothing new staged since the last install: leave the folder alone (another invocation may be
    # importing from it right now).
    stamp="${#missing[@]} $(cd "$STAGE" && ls -l --time-style=+ | awk '{print $5, $NF}' | sha256sum)"
    if [ -f "$PEERS_SITE/.stamp" ] && [ "$(cat "$PEERS_SITE/.stamp")" = "$stamp" ]; then
      echo "already installed in $PEERS_SITE from the same files"; env_line; exit 0
    fi
    # Unpack every staged wheel now (Liger needs nothing else); the CuTe DSL runtime once complete.
    rm -rf "$PEERS_SITE"; mkdir -p "$PEERS_SITE"
    for w in "${wheels[@]}"; do "$PY" -m zipfile -e "$w" "$PEERS_SITE"; done
    if [ ${#missing[@]} -eq 0 ]; then
      cat "$STAGE"/cu13.tar.xz.part* | xz -d | tar -C "$PEERS_SITE" -xf -
    fi
    env_line >"$PEERS_SITE/env.sh"
    echo "$stamp" >"$PEERS_SITE/.stamp"
    echo "unpacked ${#wheels[@]} wheels into $PEERS_SITE ($(find "$PEERS_SITE" -type f | wc -l) files, $(du -sh "$PEERS_SITE" | cut -f1))"
    if [ ${#missing[@]} -gt 0 ]; then
      echo "QuACK's CuTe DSL runtime is not complete yet (missing ${missing[*]}): carry the next $DIR/$SPLIT/call-N and run '$0 install' again"
    fi
    echo "source $PEERS_SITE/env.sh, or:"
    env_line ;;
  env) env_line ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
