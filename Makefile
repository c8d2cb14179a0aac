# The two commands a newcomer needs: `make explore` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/ptxbench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup explore test bench gpu-suite
setup: $(BIN)/ptxbench

explore: setup
	$(BIN)/ptxbench-tui

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python benchmarks/static_cost.py

# On the GPU machine (python3 with ptxbench importable, see scripts/device_prep.sh): every GPU test,
# every expert through `ptxbench check`, the pipeline benchmark -> $(OUT)/gpu-suite.json and raw.tar.gz.
# Then, here: python3 scripts/gpu_suite.py merge DIR... writes results/gpu-suite-*.json and .md.
gpu-suite:
	$(PY) scripts/gpu_suite.py run --out "$${OUT:-results/gpu-suite}" \
		--commit "$${PTXBENCH_COMMIT:-$$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
