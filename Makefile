# The README's commands. `make demo` and `make test` set themselves up in .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
DEMO_RUN := runs/demo

.PHONY: help install demo test test-avx2 test-gpu test-browser test-all lint format clean

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,browser]"
	touch $@

install: $(BIN)/.installed ## create .venv with nmt (editable), its dependencies and the dev tools

demo: install ## generate the demo corpus, train, evaluate and translate (CPU, a few minutes)
	$(BIN)/python -m nmt.demo --out data/demo
	$(BIN)/nmt-train experiment=demo train.overwrite=true
	$(BIN)/nmt-evaluate ckpt=$(DEMO_RUN)/checkpoints/best split=test heatmaps=3
	@echo "--- translating examples/demo.de:"
	$(BIN)/nmt-translate ckpt=$(DEMO_RUN)/checkpoints/best < examples/demo.de
	@echo "--- attention heatmaps of the first test sentences: $(DEMO_RUN)/eval/test.attention.*.png"

# two pytest workers of one torch thread each: most tests are small models, process start-ups and
# files, which one thread runs as fast as two (811 tests: 239 and 261 s against 404 s serially on
# a 2-core Intel Xeon with AVX512-BF16, nothing else running)
test: install ## run the fast test suite
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=25

# CPUs differ in their kernels (AVX2 only, AVX-512, AVX512-BF16, AMX): torch picks them at run time,
# so the precision tests run a second time limited to AVX2, as on a CPU without AVX-512
test-avx2: install ## run the bf16/precision tests with torch limited to AVX2 kernels
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest -q -k "bf16 or precision"

test-gpu: install ## run the GPU test suite (skipped where CUDA is not available)
	$(BIN)/python -m pytest -q -m gpu -rs

test-browser: install ## install Debian's chromium if missing, then run the headless-browser tests
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	$(BIN)/python -m pytest -q -m browser -rs

test-all: install ## run every test, slow and GPU ones included
	$(BIN)/python -m pytest -q -m ""

lint: install ## ruff check + format check
	$(BIN)/ruff check nmt tests scripts
	$(BIN)/ruff format --check nmt tests scripts

format: install ## apply ruff fixes and formatting
	$(BIN)/ruff check --fix nmt tests scripts
	$(BIN)/ruff format nmt tests scripts

clean: ## remove the demo corpus, runs and caches (keeps .venv)
	rm -rf data/demo runs .pytest_cache .ruff_cache
