# The README's two commands: `make lab` (the main job) and `make test`.
# Each sets itself up on a fresh machine: virtual environment, packages, front end.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# torch is installed first and pinned: that release is what the project is tested
# with; pyproject.toml declares the range it supports.
TORCH := torch==2.13.0
# apt-get waits for another apt-get's dpkg lock (up to 10 minutes) instead of failing.
APT_GET := apt-get -o DPkg::Lock::Timeout=600

.PHONY: venv lab test test-fast lint bench chromium clean docs

# The package's bytecode is compiled as a wheel install would (an editable install is
# not, and with PYTHONDONTWRITEBYTECODE set nothing ever is): every kernel, fork server
# and engine would otherwise compile ~80 modules from source (0.2-0.3 s each start).
# compileall only rewrites files that changed.
venv: $(STAMP)
	@$(PY) -m compileall -q dist_notebook

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[test,lab,ray]"
	touch $(STAMP)

-include mk/extension.mk
-include mk/testhosts.mk

# JupyterLab opens a copy of the notebooks in workspace/ (gitignored): running them saves
# outputs there, never into the checkout. Files already in workspace/ are kept (your work);
# delete one to get a fresh copy of it. The solutions stay out of the copy.
# The server runs in workspace/ with the environment's bin first on PATH, so a terminal
# opened in JupyterLab starts there and runs `torchrun ...` as %dist_export prints it; a
# bash terminal reads ~/.bashrc and then activates the environment (tools/lab-terminal.bashrc:
# an rc file that puts other folders first would hide it). LAB_ARGS: more jupyter lab flags.
WORKSPACE := workspace
LAB_ARGS ?=
LAB_ENV := $(abspath $(VENV))
LAB_SHELL = $$( case "$${SHELL:-/bin/sh}" in *bash) \
	echo "$$SHELL --rcfile $(CURDIR)/tools/lab-terminal.bashrc";; *) echo "$${SHELL:-/bin/sh}";; esac )

lab: venv ext-build
	@mkdir -p "$(WORKSPACE)" && dest="$$(cd "$(WORKSPACE)" && pwd)" && cd notebooks && \
		find . -type f ! -path './solutions/*' ! -path '*/.ipynb_checkpoints/*' \
		! -path './checkpoints/*' | while read -r f; do [ -e "$$dest/$$f" ] || \
		{ mkdir -p "$$dest/$$(dirname "$$f")" && cp -p "$$f" "$$dest/$$f"; }; done
	@echo "notebooks/ copied to $(WORKSPACE)/ (missing files only): run and edit them there"
	cd "$(WORKSPACE)" && PATH="$(LAB_ENV)/bin:$$PATH" VIRTUAL_ENV="$(LAB_ENV)" \
		"$(LAB_ENV)/bin/jupyter" lab --ip=127.0.0.1 --ServerApp.root_dir=. \
		--ServerApp.terminado_settings="shell_command=$(LAB_SHELL)" \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) $(LAB_ARGS)

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then $(APT_GET) update -qq && $(APT_GET) install -y -qq chromium >/dev/null; \
		else echo "install Debian's chromium (sudo apt-get install chromium) for the browser tests"; fi; }

# The front end's own unit tests (node --test, a few seconds) run before pytest.
# The reliability tests (and the flood of identical rank lines) then run once more with two
# busy processes beside the ranks (tests/conftest.py): a hang or a race that only shows
# under load fails the suite too.
test: venv ext-build ext-test chromium testhosts
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests
	DIST_NOTEBOOK_TEST_CPU_HOGS=2 $(PY) -m pytest -q -p no:cacheprovider --durations=10 \
		tests/reliability tests/integration/test_kernel_exit.py tests/magics/test_folding_flood.py

test-fast: venv
	$(PY) -m pytest -q -x tests/unit tests/magics tests/integration tests/training

lint: venv ext-lint
	$(VENV)/bin/ruff check dist_notebook tests bench testbed
	$(VENV)/bin/ruff format --check dist_notebook tests bench testbed
	$(VENV)/bin/mypy

bench: venv
	$(PIP) install -q -e ".[bench]"
	$(PY) -m bench run --all

# The docs site (docs/, built into docs/_build/html): warnings are errors (broken internal
# links among them); the getting-started page runs in a fresh kernel with 2 CPU ranks and a
# run store of its own.
docs: venv
	@$(PY) -c "import myst_nb, furo" 2>/dev/null || $(PIP) install -q -e ".[docs]"
	@store=$$(mktemp -d) && DIST_NOTEBOOK_STORE=$$store/runs.sqlite CUDA_VISIBLE_DEVICES= \
		$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html; \
		rc=$$?; rm -rf "$$store"; exit $$rc

clean:
	rm -rf $(VENV) extension/node_modules extension/lib dist_notebook/labextension/static dist_notebook/display/static
