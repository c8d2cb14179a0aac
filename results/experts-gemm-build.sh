#!/usr/bin/env bash
# Build everything the device run needs, here (no compiling on the device).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="$ROOT/.venv/lib/python3.11/site-packages/nvidia/cu13/bin"
export PATH="$BIN:$PATH"
mkdir -p "$HERE/cubins" "$HERE/variants_src"
CUBIN_DIR="$HERE/cubins" "$ROOT/scripts/build_solutions.sh" gemm_bf16_sm90a gemm_bf16_sm100a rmsnorm_bf16_sm90a vector_add_smoke > "$HERE/build.log" 2>&1 || { cat "$HERE/build.log"; exit 1; }
# Timing-only variant: same kernel with the epilogue stores skipped.
sed 's/if (m_tile < m_tiles) {/if (m_tile < -1) {/' "$ROOT/tasks/solutions/gemm_bf16_sm90a/kernel.cu" > "$HERE/variants_src/gemm_noepi.cu"
grep -q "m_tile < -1" "$HERE/variants_src/gemm_noepi.cu"
nvcc -gencode=arch=compute_90a,code=sm_90a -ptx "$HERE/variants_src/gemm_noepi.cu" -o "$HERE/variants_src/gemm_noepi.ptx"
ptxas -arch=sm_90a "$HERE/variants_src/gemm_noepi.ptx" -o "$HERE/cubins/gemm_noepi.cubin"
# Tile-order group of 8 row tiles instead of 16.
sed 's|constexpr int GROUP = 16 / CM;|constexpr int GROUP = 8 / CM;|' "$ROOT/tasks/solutions/gemm_bf16_sm90a/kernel.cu" > "$HERE/variants_src/gemm_g8.cu"
grep -q "GROUP = 8 / CM" "$HERE/variants_src/gemm_g8.cu"
for extra in "$HERE"/variants_src/*.cu; do
    b=$(basename "$extra" .cu); [[ "$b" == gemm_noepi ]] && continue
    nvcc -gencode=arch=compute_90a,code=sm_90a -ptx "$extra" -o "$HERE/variants_src/$b.ptx"
    ptxas -arch=sm_90a -v "$HERE/variants_src/$b.ptx" -o "$HERE/cubins/$b.cubin" 2>&1 | grep -E "registers|spill" || true
done
ls -la "$HERE/cubins"
