# JupyterLab side panel (extension/) and server extension (dist_notebook/server).
# Included from the top Makefile, which defines VENV and the `venv` target.
#
#   make ext-build    npm ci (when the lock changed), production build into
#                     dist_notebook/labextension, and link it into the venv's labextensions;
#                     the cell's live view (an anywidget module, the same chart sources)
#                     into dist_notebook/display/static/live.{js,css}, which the kernel
#                     reads from the package itself (editable install or wheel)
#   make ext-lint     tsc --noEmit and prettier --check
#   make ext-test     unit tests of the front end's data code (node --test)
#   make ext-generate the TypeScript generated from Python: src/protocol.ts (the record,
#                     states, measures) and src/contracts.ts (REST answers, widget
#                     messages); tests fail while a committed one is out of date
#   make test-server  REST API tests (real Jupyter server, real ipyparallel clusters)
#   make test-ui      browser tests (real JupyterLab, Debian chromium)

VENV ?= .venv
EXT_DIR := extension
LABEXT_DIR := dist_notebook/labextension
EXT_MODULES := $(EXT_DIR)/node_modules/.installed
EXT_OUTPUT := $(LABEXT_DIR)/package.json
LIVE_OUTPUT := dist_notebook/display/static/live.js
EXT_SOURCES := $(wildcard $(EXT_DIR)/src/*.ts $(EXT_DIR)/src/chart/*.ts $(EXT_DIR)/style/* $(EXT_DIR)/schema/*.json) \
	$(EXT_DIR)/package.json $(EXT_DIR)/tsconfig.json
# The venv's own labextensions folder: an editable install copies shared-data once, at
# install time, so the built assets are linked there instead (the wheel carries copies).
EXT_LINK = $(CURDIR)/$(VENV)/share/jupyter/labextensions/dist-notebook
# jupyter-builder (called by the npm scripts) lives in the venv
EXT_ENV = PATH="$(CURDIR)/$(VENV)/bin:$$PATH"

.PHONY: ext-build ext-lint ext-test ext-generate test-server test-ui

$(EXT_MODULES): $(EXT_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "the front end needs Node.js 20.19+ and npm"; exit 1; }
	cd $(EXT_DIR) && npm ci --no-audit --no-fund
	touch $@

$(EXT_OUTPUT): $(EXT_MODULES) $(EXT_SOURCES) | venv
	cd $(EXT_DIR) && $(EXT_ENV) npm run build:prod
	touch $(LABEXT_DIR)/.gitkeep $@

# The anywidget module alone (esbuild, a fraction of a second): no labextension needed.
$(LIVE_OUTPUT): $(EXT_MODULES) $(EXT_SOURCES)
	cd $(EXT_DIR) && npm run build:live

ext-build: $(EXT_OUTPUT) $(LIVE_OUTPUT) | venv
	@if [ "$$(readlink "$(EXT_LINK)")" != "$(CURDIR)/$(LABEXT_DIR)" ]; then \
		rm -rf "$(EXT_LINK)" && mkdir -p "$$(dirname "$(EXT_LINK)")" && \
		ln -s "$(CURDIR)/$(LABEXT_DIR)" "$(EXT_LINK)" && \
		echo "linked $(EXT_LINK) -> $(LABEXT_DIR)"; fi

ext-lint: $(EXT_MODULES)
	cd $(EXT_DIR) && npm run lint:check

ext-test: $(EXT_MODULES)
	cd $(EXT_DIR) && npm test

ext-generate: venv
	$(VENV)/bin/python -m dist_notebook.protocol > $(EXT_DIR)/src/protocol.ts
	$(VENV)/bin/python -m dist_notebook.contracts > $(EXT_DIR)/src/contracts.ts

test-server: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/server

test-ui: venv ext-build chromium
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/ui
