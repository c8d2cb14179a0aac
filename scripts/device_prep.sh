#!/usr/bin/env bash
# Run on the development machine (not the GPU machine): fill ./.whl with PTXBench's own wheel and the
# wheels the GPU machine's image lacks, so a GPU run can install them offline. Then, on the GPU machine
# (with carry=[".whl"]):
#   source scripts/device_env.sh && make gpu-suite
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -f .whl/ptxbench-*.whl
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
"$py" -m pip wheel -q --no-deps --no-build-isolation -w .whl .
wheels=${DEVICE_WHEELS:-"$top/../shared/scripts/device-wheels"}
if [ -x "$wheels" ]; then
  "$wheels" "$@"
else
  echo "device-wheels not found at $wheels; only the ptxbench wheel was built" >&2
fi
# The pinned ptxas (the nvcc wheel's, 47 MB as a wheel, over what a device call carries): the binary alone,
# compressed. scripts/device_env.sh unpacks it there.
ptxas=$("$py" -c 'from ptxbench.engine.toolchain import find_tool; print(find_tool("ptxas"))' 2>/dev/null || true)
if [ -n "$ptxas" ] && [ ! -f .whl/ptxas.xz -o "$ptxas" -nt .whl/ptxas.xz ]; then
  xz -6 -T0 -c "$ptxas" > .whl/ptxas.xz
fi
ls -1 .whl
