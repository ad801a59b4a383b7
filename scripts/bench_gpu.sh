#!/usr/bin/env bash
# The GPU benchmark in one command (docs/gpu.md): training target tokens/s, MFU and peak GPU
# memory of GRU + Bahdanau and Transformer small/base in fp32 and bf16, eager, compiled and as CUDA
# graphs, and translation tokens/s (greedy, beam 5; batch 64 and 1). MFU counts the FLOPs of the
# matrix products per target token (embedding lookups not; attention's length-squared terms in).
# JSON on stdout and, with --out FILE, in FILE; progress on stderr.
#
#   scripts/bench_gpu.sh                          on a CUDA machine (under 10 minutes on one H100)
#   scripts/bench_gpu.sh --device cpu --quick     the same pipeline, tiny, on the CPU (a check)
#   scripts/bench_gpu.sh --device cpu --parts flops   each model's FLOPs per target token (no GPU)
#
# Fails at once with a message when CUDA is not available. The driver is scripts/bench_gpu.py;
# it runs scripts/bench_train.py and scripts/bench_translate.py once per row.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3  # an installed nmt without the Makefile's .venv
exec "$PYTHON" scripts/bench_gpu.py "$@"
