# Baton developer commands. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

NPM_CLIENTS := tests/agentmemory/node_modules/.installed

.PHONY: install browser wrk npm-clients mcp-answers demo lint test test-fast compose-check bench bench-ab bench-floor serve clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[test,lint,amfs,langgraph,bench,vectors]'
	touch $(STAMP)

install: $(STAMP)

## make npm-clients: agentmemory's hook scripts and MCP shim, the MCP Inspector's CLI and the
## MCP reference memory server (make bench's), Gemini CLI and Codex (baton setup's checks),
## pinned by their lock files
$(NPM_CLIENTS): tests/agentmemory/package-lock.json tests/mcp-inspector/package-lock.json tests/mcp-reference/package-lock.json tests/hosts/package-lock.json
	cd tests/agentmemory && npm ci --ignore-scripts --omit=optional --omit=peer --no-audit --no-fund --loglevel=error
	cd tests/mcp-inspector && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cd tests/mcp-reference && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cd tests/hosts && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(NPM_CLIENTS)

npm-clients: $(NPM_CLIENTS)

# $(call apt-install,COMMAND,PACKAGE,WHAT FOR): apt-get install PACKAGE when COMMAND is missing
# (as root, or through sudo); otherwise say what to install. No commas in WHAT FOR.
apt-install = command -v $(1) >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then \
	    SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	    echo "make: installing $(2) ($(3))"; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) >/dev/null; \
	  else \
	    echo "make: $(3) needs $(2): install your system's '$(2)' package" >&2; exit 1; \
	  fi; }

## make browser: Debian's Chromium for the dashboard's browser test, installed when missing
browser:
	@$(call apt-install,chromium,chromium,the dashboard's browser test)

## make wrk: the native HTTP load generator of make bench, installed when missing
wrk:
	@$(call apt-install,wrk,wrk,make bench's REST scenarios)

## make mcp-answers: rewrite server/mcp/mcp_answers.json, the SDK server's answers `baton mcp`
## gives while the SDK loads (after changing a tool; tests/test_mcp_stdio.py says when)
mcp-answers: $(STAMP)
	$(BIN)/python -m baton.server.mcp.mcp_server > server/mcp/mcp_answers.json

## make demo: the scout/executor story in separate processes (ARGS=--keep to browse after)
demo: $(STAMP)
	$(BIN)/baton demo $(ARGS)

## make lint: ruff (lint and format) and mypy --strict on the package
# mypy needs the import names as folders: .venv/typecheck/baton/server -> server/, and so on.
TYPECHECK := $(VENV)/typecheck
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/baton
	for folder in server queue agents demo; do ln -s "$(CURDIR)/$$folder" $(TYPECHECK)/baton/$$folder; done
	cd $(TYPECHECK) && "$(CURDIR)/$(BIN)/mypy" --config-file "$(CURDIR)/pyproject.toml" -p baton

## make test: lint and types, then the whole suite against a real embedded Valkey server,
## its tests shared among one pytest-xdist worker per core (up to 4; ARGS=-n0 for one process)
WORKERS := -n auto --maxprocesses 4
test: lint browser $(NPM_CLIENTS)
	$(BIN)/python -m pytest $(WORKERS) $(ARGS)

## make test-fast: everything but the slow multi-process end-to-end tests
test-fast: $(STAMP) $(NPM_CLIENTS)
	$(BIN)/python -m pytest $(WORKERS) -m 'not slow' $(ARGS)

## make compose-check: compose.yaml, then compose.cluster.yaml, on a real Docker engine:
## built, brought up, the demo's story and a killed API replica checked, torn down
## (ARGS=--cluster or --keep for one run). With ../shared/tools/docker-standins beside the
## checkout (a machine without a registry), it starts the engine and the base images first.
STANDINS := ../shared/tools/docker-standins
compose-check: $(STAMP)
	@if [ -x $(STANDINS) ]; then $(STANDINS); fi
ifeq ($(ARGS),)
	$(BIN)/python tests/compose_check.py
	$(BIN)/python tests/compose_check.py --cluster
else
	$(BIN)/python tests/compose_check.py $(ARGS)
endif

## make bench: speed next to same-run baselines; writes docs/benchmarks.md (ARGS=--quick)
bench: $(STAMP) wrk $(NPM_CLIENTS)
	$(BIN)/python -m tests.bench $(ARGS)

## make bench-ab BASE=<git revision>: that build and this checkout side by side, interleaved
bench-ab: $(STAMP) wrk
	$(BIN)/python -m tests.bench_ab $(BASE) $(ARGS)

## make bench-floor: remember, recall and resume next to the same requests on the same stack without Baton's work
bench-floor: $(STAMP) wrk
	$(BIN)/python -m tests.bench_floor $(ARGS)

## make serve: the REST API on http://127.0.0.1:8765 with the embedded Redis
serve: $(STAMP)
	$(BIN)/baton serve $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache tests/agentmemory/node_modules
