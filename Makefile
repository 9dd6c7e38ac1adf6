# Two commands: `make demo` and `make test`. Each sets up .venv on a fresh machine first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench browser-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,browser]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gymlab demo

# The browser test needs Debian's Chromium; install it when missing (no browser download).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) browser-deps
	$(BIN)/ruff check gymlab tests environments
	$(BIN)/ruff format --check gymlab tests environments
	# includes tests/cli/test_wheel.py: the wheel installed alone into a fresh venv (demo, init, notebook 01)
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/gymlab bench

clean:
	rm -rf $(VENV) gymlab-demo build *.egg-info
