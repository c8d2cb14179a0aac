#!/usr/bin/env bash
# Regenerate the attention expert solutions' PTX with the wheel's nvcc and show what ptxas makes of it.
#
#   scripts/build_attention.sh [CUBIN_DIR] [--variants]
#
# - tasks/solutions/attn_fwd_sm90a/kernel.cu and attn_bwd_sm90a/kernel.cu are the sources; the causal
#   folders' kernel.cu are written from them with ATTN_CAUSAL set to 1 (do not edit those by hand).
# - For each of the four folders: kernel.cu -> kernel.ptx (nvcc -gencode=arch=compute_90a,code=sm_90a -ptx),
#   then ptxas -v on kernel.ptx (registers, shared memory, spills, C75xx notes) and the instruction
#   families found in the SASS (HGMMA, UTMALDG, SYNCS, ...).
# - Cubins go to CUBIN_DIR (default .scratch/attn/build, ignored by git) for the device harness.
# - --variants also builds variants with other compile-time switches into CUBIN_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.venv/lib/python3.11/site-packages/nvidia/cu13/bin"
export PATH="$BIN:$PATH"
SOL="$ROOT/tasks/solutions"
OUTDIR="$ROOT/.scratch/attn/build"
VARIANTS=0
for arg in "$@"; do
  case "$arg" in
    --variants) VARIANTS=1 ;;
    *) OUTDIR="$arg" ;;
  esac
done
mkdir -p "$OUTDIR"
GENCODE="-gencode=arch=compute_90a,code=sm_90a"

write_causal() {  # $1 = source folder, $2 = causal folder
  {
    echo "// Written by scripts/build_attention.sh from ../$1/kernel.cu with the causal switch set."
    echo "#define ATTN_CAUSAL 1"
    cat "$SOL/$1/kernel.cu"
  } > "$SOL/$2/kernel.cu"
}
write_causal attn_fwd_sm90a attn_fwd_causal_sm90a
write_causal attn_bwd_sm90a attn_bwd_causal_sm90a

report() {  # $1 = ptx, $2 = cubin, $3 = label
  echo "== $3"
  ptxas -arch=sm_90a -v "$1" -o "$2" 2>&1 | grep -vE "bytes gmem|Compile time" || true
  grep -m1 -E "^\.version" "$1"
  echo -n "   SASS families: "
  cuobjdump -sass "$2" | grep -oE "HGMMA|UTMALDG|UBLKCP|SYNCS\.[A-Z0-9.]+|USETMAXREG|REDG\.E\.ADD\.F32x4|WARPGROUP\.[A-Z]+" \
    | sort | uniq -c | awk '{printf "%s x%s  ", $2, $1}'
  echo
  local local_mem
  local_mem=$(cuobjdump -sass "$2" | grep -cE "\b(LDL|STL)\b" || true)
  echo "   local-memory instructions (LDL/STL): $local_mem"
}

for task in attn_fwd_sm90a attn_fwd_causal_sm90a attn_bwd_sm90a attn_bwd_causal_sm90a; do
  (cd "$SOL/$task" && nvcc $GENCODE -ptx kernel.cu -o kernel.ptx)
  report "$SOL/$task/kernel.ptx" "$OUTDIR/$task.cubin" "$task"
done

if [ "$VARIANTS" = 1 ]; then
  build_variant() {  # $1 = name, $2 = source folder, rest = -D flags
    local name="$1" src="$2"
    shift 2
    (cd "$SOL/$src" && nvcc $GENCODE -ptx "$@" kernel.cu -o "$OUTDIR/$name.ptx")
    report "$OUTDIR/$name.ptx" "$OUTDIR/$name.cubin" "variant $name ($*)"
  }
  build_variant var_fwd_pipe0 attn_fwd_sm90a -DATTN_FWD_PIPE=0
  build_variant var_fwd_st3 attn_fwd_sm90a -DATTN_FWD_STAGES=3
  build_variant var_fwd_causal_pipe0 attn_fwd_causal_sm90a -DATTN_FWD_PIPE=0
  build_variant var_bwd_dskm attn_bwd_sm90a -DATTN_BWD_DS_KMAJOR=1
  # Dynamic shared memory the 3-stage variant needs: 1 + 6 tiles of 32 KiB, 13 barriers, 1 KiB slack.
  echo $((32768 * 7 + 13 * 8 + 1024)) > "$OUTDIR/var_fwd_st3.smem"
fi
