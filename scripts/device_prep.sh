#!/usr/bin/env bash
# Run on the development machine (not the GPU machine): fill ./.whl with PTXBench's own wheel and the
# wheels the GPU machine's image lacks, so a GPU run can install them offline. Then, on the GPU machine
# (with carry=[".whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   python3 scripts/gpu_suite.py --out "$OUT"
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
ls -1 .whl
