# Day one: `make demo`, then `make lab`. `make test` runs the whole suite. Each sets up .venv on a fresh machine first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# what the demo and JupyterLab need (the package and its `lab` extra), and on top of it the test tools
LAB_STAMP := $(VENV)/.installed-lab
TEST_STAMP := $(VENV)/.installed-test
LAB_PORT ?= 8888
# `make lab` opens JupyterLab here: copies of the tutorials, so a researcher's edits and autosaves never
# touch notebooks/ (what the tests run, as committed). Tutorials added later are copied in; an edited copy is
# never overwritten: a tutorial changed upstream since it was copied (WORKSPACE/.tutorials keeps what was
# copied) is named, and its new version put in WORKSPACE/updated/ (a copy with no edits is just refreshed).
WORKSPACE ?= workspace
# every notebook runs in CI in a venv made exactly as `make demo` makes .venv: the package and its lab extra
DEMO_VENV := .venv-demo

.PHONY: demo lab workspace demo-venv side-venvs test test-fast test-nemo bench browser-deps clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(LAB_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[lab]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

$(TEST_STAMP): pyproject.toml $(LAB_STAMP)
	$(BIN)/python -m pip install -q -e '.[lab,dev,browser,train]'
	touch $@

demo: $(LAB_STAMP)
	$(BIN)/gymlab demo
	@echo
	@echo "Next: run 'make lab' and open 01_quickstart.ipynb, then 02b_your_first_environment.ipynb to write your own."
	@echo "The rollouts above are in ./gymlab-demo/ (rollouts = gymlab.load(\"gymlab-demo/counter_rollouts.jsonl\"))."

# JupyterLab on the workspace (see WORKSPACE), on 127.0.0.1 only, with a fresh token (printed; passed in the environment, not argv);
# no news or update checks (no calls out). As root (a container) it passes --allow-root.
# A busy port is an error rather than a silent move to another one: `make lab LAB_PORT=8899`.
workspace:
	@mkdir -p $(WORKSPACE)/.tutorials
	@for f in notebooks/*.ipynb notebooks/*.md; do \
		n=$${f#notebooks/}; w="$(WORKSPACE)/$$n"; was="$(WORKSPACE)/.tutorials/$$n"; \
		if [ ! -e "$$w" ] || cmp -s "$$f" "$$w"; then cp "$$f" "$$w"; \
		elif [ -e "$$was" ] && cmp -s "$$f" "$$was"; then continue; \
		elif [ -e "$$was" ] && cmp -s "$$w" "$$was"; then cp "$$f" "$$w"; \
			echo "$$n changed upstream; your copy had no edits, so it is now the new version"; \
		else mkdir -p "$(WORKSPACE)/updated"; cp "$$f" "$(WORKSPACE)/updated/$$n"; \
			echo "$$n changed upstream since you copied it; the new version is $(WORKSPACE)/updated/$$n (your copy is kept)"; \
		fi; cp "$$f" "$$was"; \
	done

lab: $(LAB_STAMP) workspace
	@token=$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(24))'); \
	echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab/tree/01_quickstart.ipynb?token=$$token"; \
	echo "(open that address in a browser; Ctrl-C here stops JupyterLab)"; \
	root=$$([ "$$(id -u)" = 0 ] && echo --allow-root); \
	JUPYTER_TOKEN=$$token exec $(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(LAB_PORT) $$root \
		--ServerApp.port_retries=0 --ServerApp.root_dir=$(WORKSPACE) \
		--LabApp.news_url= --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate

# The browser test needs Debian's Chromium; install it when missing (no browser download).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# OpenEnv and verifiers each need an mcp the `mcp` extra rules out (openenv: fastmcp 3, mcp<2; verifiers:
# mcp==2.0.0), and each other's: each gets a venv of its own with the package, its extra and pytest.
# tests/envs/test_side_venvs.py runs tests/envs/test_openenv.py (test_verifiers.py) and their fuzzing there.
SIDE_VENVS := .venv-openenv .venv-verifiers

.venv-%/.installed: pyproject.toml
	$(PY) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q -e '.[$*,gymnasium]' 'pytest>=8' 'pytest-asyncio>=0.23' 'schemathesis>=4.0'
	touch $@

side-venvs: $(addsuffix /.installed,$(SIDE_VENVS))

# The demo's venv, made by the recipe `make demo` uses (LAB_STAMP), in DEMO_VENV.
demo-venv:
	@$(MAKE) --no-print-directory VENV=$(DEMO_VENV) $(DEMO_VENV)/.installed-lab

# The notebooks' kernels (tests/notebooks, tests/browser) are the demo venv's: JUPYTER_PATH puts its
# kernel spec first, and GYMLAB_DEMO_VENV lets a test check that the kernel runs there.
# The four venvs (test, demo, openenv, verifiers) install side by side (-j4).
test: browser-deps
	@$(MAKE) --no-print-directory -j4 $(TEST_STAMP) demo-venv side-venvs
	$(BIN)/ruff check gymlab tests environments
	$(BIN)/ruff format --check gymlab tests environments
	# the type check: mypy's error count may not rise (tools/mypy_ratchet.py, docs/architecture.md)
	$(BIN)/python tools/mypy_ratchet.py
	# includes tests/cli/test_wheel.py: the wheel installed alone into a fresh venv (demo, init, notebook 01)
	# three workers on two cores, each taking whole test files (--dist loadfile): the suite waits on servers,
	# kernels and subprocesses more than it computes (7 min 50 s against 9 min 38 s with two, 2026-12-05),
	# and every test holds with both cores busy
	JUPYTER_PATH=$(abspath $(DEMO_VENV))/share/jupyter GYMLAB_DEMO_VENV=$(abspath $(DEMO_VENV)) \
		$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile

# A quick loop: the suite without the tests marked slow (a Ray cluster, the notebooks, the browser, the wheel).
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile -m "not slow"

# NeMo Gym 0.7.0 itself (its CLI, profiler and servers) in its own venv: it declares Python >= 3.13.14, and
# runs on any 3.13 (found through pyenv or PATH; NEMO_PY=... to choose), installed with --ignore-requires-python.
# Then the tests behind the `nemo` marker (they skip, saying why, wherever this venv is missing).
NEMO_VENV := .venv-nemo
NEMO_PY ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) $(shell command -v python3.13))

$(NEMO_VENV)/bin/gym:
	@test -n "$(NEMO_PY)" || { echo "test-nemo needs a Python 3.13 (pyenv install 3.13, or NEMO_PY=/path/to/python3.13)"; exit 1; }
	$(NEMO_PY) -m venv $(NEMO_VENV)
	$(NEMO_VENV)/bin/python -m pip install -q --ignore-requires-python nemo-gym==0.7.0 aiohttp

test-nemo: $(TEST_STAMP) $(NEMO_VENV)/bin/gym
	NEMO_VENV=$(NEMO_VENV) $(BIN)/python -m pytest -q -p no:cacheprovider -m nemo tests


# The benchmarks (benchmarks/, not part of the package): `make bench ARGS="--only frames"`,
# `make bench ARGS="--only process lab --against ../other-checkout"`.
# hf_model needs the train extra (torch, transformers), installed beside the lab extra.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): pyproject.toml $(LAB_STAMP)
	$(BIN)/python -m pip install -q -e '.[lab,train]'
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) $(NEMO_VENV) $(DEMO_VENV) $(SIDE_VENVS) gymlab-demo build *.egg-info
