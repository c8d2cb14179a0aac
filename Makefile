# The two commands a newcomer needs: `make explore` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/ptxbench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup explore test bench
setup: $(BIN)/ptxbench

explore: setup
	$(BIN)/ptxbench-tui

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python benchmarks/static_cost.py
