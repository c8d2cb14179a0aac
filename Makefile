# The two commands a newcomer needs: `make explore` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/ptxbench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup explore test lint lint-tree bench gpu-suite
setup: $(BIN)/ptxbench

explore: setup
	$(BIN)/ptxbench-tui

test: setup
	$(BIN)/pytest -q

# Lint: ruff (check over the tree; format on the files already formatted), mypy, import-linter's
# contracts (pyproject.toml). mypy reads the installed names through a tree of links, .lint/ptxbench/.
# The tree moves to ruff format file by file: add a file to FORMATTED when it is formatted.
PACKAGES := engine:engine tasks:tasks db:db fixit:fixit models:models services:services cli:cli tui:ptxbench_tui themes:themes
FORMATTED := $(filter-out services/fixit_models.py,$(wildcard services/*.py)) cli/conventions.py engine/arch.py tasks/dtypes.py \
	ptxbench_tui/host.py tests/test_services.py tests/test_contracts.py tests/test_pool.py tests/test_cluster.py \
	tests/test_scale_bench.py tests/test_run_scale.py benchmarks/scale_gpu.py

lint-tree:
	@mkdir -p .lint/ptxbench
	@for m in $(PACKAGES); do ln -sfn ../../$${m#*:} .lint/ptxbench/$${m%%:*}; done

lint: setup lint-tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check $(FORMATTED)
	$(BIN)/mypy .lint/ptxbench
	$(BIN)/lint-imports

bench: setup
	$(BIN)/python benchmarks/static_cost.py

# On the GPU machine (python3 with ptxbench importable, see scripts/device_prep.sh): every GPU test,
# every expert through `ptxbench check`, the pipeline benchmark -> $(OUT)/gpu-suite.json and raw.tar.gz.
# Then, here: python3 scripts/gpu_suite.py merge DIR... writes results/gpu-suite-*.json and .md.
gpu-suite:
	$(PY) scripts/gpu_suite.py run --out "$${OUT:-results/gpu-suite}" \
		--commit "$${PTXBENCH_COMMIT:-$$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
