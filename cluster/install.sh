#!/usr/bin/env bash
# Installs nmt-pipeline and its dependencies into the current Python environment.
# Used by the README, by .ci/run and by the Ray cluster's setup_commands, so every
# machine gets the same install.
#
# The order matters: torch first (pinned, so pip takes the local CPU wheel or the
# cluster image's CUDA build instead of resolving a new one), then DeepSpeed, which
# compiles against the installed torch and so needs --no-build-isolation.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python3 -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python3 -m pip install --quiet --disable-pip-version-check --no-build-isolation "deepspeed>=0.15"
python3 -m pip install --quiet --disable-pip-version-check -e "${here}[dev]"
