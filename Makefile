# The README's two commands: `make demo` and `make test`. Each sets itself up:
# a virtualenv in .venv, the project with its dev extra, and a real llama-server
# ($INFERACTORS_LLAMA_SERVER, else llama-server on PATH, else the pinned build,
# compiled once into ~/.cache/inferactors and reused).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test setup llama-server lint typecheck bench clean

demo: $(STAMP)
	@$(BIN)/inferactors llama-server >/dev/null
	$(BIN)/inferactors demo

# pytest -n auto: the suite on pytest-xdist workers (tests/conftest.py: two per core, at
# least 4); tests marked exclusive still run with the machine to themselves.
test: $(STAMP)
	@$(BIN)/inferactors llama-server >/dev/null
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	INFERACTORS_LLAMA_SERVER="$$($(BIN)/inferactors llama-server)" $(BIN)/pytest -n auto

setup: $(STAMP)

llama-server: $(STAMP)
	$(BIN)/inferactors llama-server

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

bench: $(STAMP)
	@for script in bench/bench_*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
