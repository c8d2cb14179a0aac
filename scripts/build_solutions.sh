#!/usr/bin/env bash
# Regenerate every expert solution's kernel.ptx from its kernel.cu with the
# pinned nvcc (the wheel's, never a system CUDA), then assemble each PTX with
# the wheel's ptxas -v to show its resources, and list the instruction
# families that show up in the SASS.
#
#   scripts/build_solutions.sh [solution ...]     (default: all in tasks/solutions)
#   CUBIN_DIR=dir scripts/build_solutions.sh      (where cubins go; default a temp dir)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOLUTIONS="$ROOT/tasks/solutions"
BIN="${PTXBENCH_CUDA_BIN:-$ROOT/.venv/lib/python3.11/site-packages/nvidia/cu13/bin}"
NVCC="$BIN/nvcc"
PTXAS="$BIN/ptxas"
CUOBJDUMP="$BIN/cuobjdump"
CUBIN_DIR="${CUBIN_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ptxbench-solutions.XXXXXX")}"
mkdir -p "$CUBIN_DIR"
export PATH="$BIN:$PATH"   # cuobjdump -sass runs nvdisasm from PATH

for tool in "$NVCC" "$PTXAS" "$CUOBJDUMP"; do
    [[ -x "$tool" ]] || { echo "missing $tool (pip install the pinned nvidia-cuda-* wheels)" >&2; exit 2; }
done

# SASS opcodes that stand for each requested instruction family.
families_for() {
    case "$1" in
        *_sm100a) echo "UTCHMMA UTCATOMSWS LDTM UTCBAR UTMALDG SYNCS" ;;
        gemm_*) echo "HGMMA UTMALDG SYNCS USETMAXREG" ;;
        rmsnorm_*|layernorm_*|softmax_*) echo "UBLKCP SYNCS" ;;
        *) echo "" ;;
    esac
}

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
    for d in "$SOLUTIONS"/*/; do [[ -f "$d/kernel.cu" ]] && names+=("$(basename "$d")"); done
fi

status=0
for name in "${names[@]}"; do
    dir="$SOLUTIONS/$name"
    case "$name" in
        *_sm100a) arch=100a ;;
        *) arch=90a ;;
    esac
    echo "== $name (sm_$arch)"
    "$NVCC" -gencode=arch=compute_$arch,code=sm_$arch -ptx "$dir/kernel.cu" -o "$dir/kernel.ptx"
    grep -m2 -E '^\.(version|target)' "$dir/kernel.ptx" | tr '\n' ' '; echo
    cubin="$CUBIN_DIR/$name.cubin"
    if ! "$PTXAS" -arch=sm_$arch -v "$dir/kernel.ptx" -o "$cubin" 2>&1 | sed 's/^/   /'; then
        echo "   ptxas FAILED"; status=1; continue
    fi
    sass="$("$CUOBJDUMP" -sass "$cubin")"
    line="   SASS:"
    for op in $(families_for "$name"); do
        n=$(grep -c "$op" <<<"$sass" || true)
        line+=" $op=$n"
        [[ "$n" -gt 0 ]] || status=1
    done
    spills=$(grep -c -E '\b(LDL|STL)\b' <<<"$sass" || true)
    echo "$line local-memory-ops=$spills"
done
echo "cubins in $CUBIN_DIR"
exit $status
