# Two promises: `make demo` runs the main job, `make test` passes the tests, on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
comma := ,
EXTRAS ?= triton,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-10)-$(subst $(comma),_,$(EXTRAS))

.PHONY: venv stack-up stack-down stack-status demo test unit lint

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* && touch $@

stack-up: venv
	$(BIN)/workbench stack up

stack-down:
	-test -x $(BIN)/workbench && $(BIN)/workbench stack down

stack-status: venv
	$(BIN)/workbench stack status

demo: stack-up
	$(BIN)/workbench stack probe

test: stack-up
	$(BIN)/python -m pytest

unit: venv
	$(BIN)/python -m pytest -m "not services and not gpu"

lint: venv
	$(BIN)/ruff check workbench tests pipelines
