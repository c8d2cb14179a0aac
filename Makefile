# The two commands a newcomer needs: `make explore` and `make test`.
# `make explore` installs the explorer's runtime only: the project's own dependencies, without
# torch, the NVIDIA toolchain or the training and lint tools (those are extras). `make test`,
# `make lint` and `make bench` install the dev set (the `dev` extra, which brings `toolchain`).
# The dev set holds the explorer's runtime, so one .venv serves both. `make setup-explore
# VENV=/tmp/explore-venv` builds the explorer's install elsewhere (how its size and time are measured).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEV_SET := $(VENV)/.ptxbench-dev
EXPLORER := $(VENV)/.ptxbench-explore

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(DEV_SET): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(EXPLORER): pyproject.toml | $(BIN)/python
	@if [ $(DEV_SET) -nt pyproject.toml ]; then echo "$(VENV) has the dev set, which runs the explorer"; \
	else $(BIN)/pip install -q -e .; fi
	touch $@

.PHONY: setup setup-explore explore test lint lint-tree bench gpu-suite
setup: $(DEV_SET)
setup-explore: $(EXPLORER)

explore: setup-explore
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
