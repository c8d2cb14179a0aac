#!/usr/bin/env bash
# Source on the GPU machine, from the repository root, after scripts/device_prep.sh filled .whl here
# (and the call carried it): installs the wheels offline, unpacks the project's ptxas (the pinned
# wheel's, 13.5) and points the engine at it and at the machine's CUDA for the rest.
#   source scripts/device_env.sh && make gpu-suite
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site
export PATH="$PATH:/usr/local/cuda/bin"
if [ -f .whl/ptxas.xz ]; then
  mkdir -p /tmp/ptxbench-bin && xz -dc .whl/ptxas.xz > /tmp/ptxbench-bin/ptxas && chmod +x /tmp/ptxbench-bin/ptxas
  export PTXBENCH_PTXAS=/tmp/ptxbench-bin/ptxas
fi
for tool in nvcc cuobjdump nvdisasm; do
  var="PTXBENCH_$(echo "$tool" | tr a-z A-Z)"
  [ -z "${!var:-}" ] && command -v "$tool" >/dev/null && export "$var=$(command -v "$tool")"
done
export PTXBENCH_CACHE=/tmp/ptxbench-cache PYTHONUNBUFFERED=1
echo "ptxas: $("$PTXBENCH_PTXAS" --version 2>/dev/null | tail -1 || echo '?') nvcc: ${PTXBENCH_NVCC:-none}"
