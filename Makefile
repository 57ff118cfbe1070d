# The README's two commands: `make demo` and `make test`. Each sets itself up:
# a virtualenv in .venv, the project with its dev extra, and a real llama-server
# ($INFERACTORS_LLAMA_SERVER, else llama-server on PATH, else the pinned build,
# compiled once into ~/.cache/inferactors and reused). `make test` also needs a browser
# for the web page's tests: Debian's chromium, installed by `make browser` when missing
# (with apt-get, as root; as another user it says so, and those tests are skipped, each
# saying why).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test setup browser llama-server lint typecheck bench clean

demo: $(STAMP)
	@$(BIN)/inferactors llama-server >/dev/null
	$(BIN)/inferactors demo

# pytest -n auto: the suite on pytest-xdist workers (tests/conftest.py: two per core, at
# least 4); tests marked exclusive still run with the machine to themselves.
test: $(STAMP) browser
	@$(BIN)/inferactors llama-server >/dev/null
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	INFERACTORS_LLAMA_SERVER="$$($(BIN)/inferactors llama-server)" $(BIN)/pytest -n auto

setup: $(STAMP) browser

CHROMIUM := /usr/bin/chromium

browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the web page's tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
		echo "no $(CHROMIUM), and apt-get needs root: the web page's browser tests will be skipped" >&2; \
	fi

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
