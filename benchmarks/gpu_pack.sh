#!/usr/bin/env bash
# Packs what benchmarks/gpu_check.sh needs on a GPU node without network access into .gpu_carry/
# (git-ignored), here, where pip reaches the package registry: benchmarks/gpu/gpu_pack.py
# says what each part holds and checks that each call of the campaign fits what one
# call may carry.
#
#   bash benchmarks/gpu_pack.sh [--model TRAIN_ARTIFACT_DIR] [--python-version 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 benchmarks/gpu/gpu_pack.py "$@" 2>&1 | grep -v "^WARNING: \(Location\|Running pip as\)"
exit "${PIPESTATUS[0]}"
