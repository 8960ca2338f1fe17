#!/usr/bin/env bash
# MaxText 0.2.5's own venv (it needs Python >= 3.12), for the tests that run MaxText's trainer on CPU;
# scripts/setup.sh runs this in the background. One step a line.
set -euo pipefail
cd "$(dirname "$0")/.."

# The venv, on Python 3.12.
PYENV_VERSION=3.12.1 python3.12 -m venv .venv-maxtext

# Its wheel declares no dependencies: install it without them ...
.venv-maxtext/bin/pip install -q --no-deps maxtext==0.2.5

# ... then the CPU part of the requirements file it ships: its list without the CUDA wheels ...
grep -v -E '^(cuda-|nvidia-cutlass)' .venv-maxtext/lib/python3.12/site-packages/dependencies/requirements/generated_requirements/decoupled-requirements.txt > .venv-maxtext/cpu-requirements.txt

# ... installed.
.venv-maxtext/bin/pip install -q -r .venv-maxtext/cpu-requirements.txt

