#!/usr/bin/env bash
# The one command a session with a GPU runs (in under 9 minutes): the tests marked
# `gpu`, the training throughput table (ours against MarianMTModel, Transformer base
# and big, bf16, 25,000 target tokens a batch, tokens/s and MFU against the datasheet
# peak), the decode speed table on CUDA, and one summary against the targets.
#
# Pack first, here (benchmarks/gpu_pack.sh), then on the lent machine, with the device
# tool:  bash benchmarks/gpu_check.sh        (carry: .gpu_carry)
# Results land in $OUT (the device tool's folder) or /tmp/gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."
carry=${GPU_CARRY:-.gpu_carry}
results=${OUT:-/tmp/gpu_check}
mkdir -p "$results"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
begin=$SECONDS

# What the image lacks, from the carried wheels; this package itself without its
# dependencies (the image's torch stays).
if [ -d "$carry/wheels" ]; then
    $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/nmt-site "$carry"/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/nmt-site${PYTHONPATH:+:$PYTHONPATH}
fi
$python -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
    || export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[ -d "$carry/corpora" ] && export NMT_CORPORA=$PWD/$carry/corpora
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$python -c "import torch, deepspeed, transformers; print('torch', torch.__version__, '| deepspeed', \
deepspeed.__version__, '| transformers', transformers.__version__)" 2>&1 | grep -v -i warn

echo; echo "== tests marked gpu"
timeout 240 $python -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$results/gpu_tests.txt" | tail -25
tests_status=${PIPESTATUS[0]}

echo; echo "== training throughput (bf16, 25,000 target tokens a batch)"
timeout 300 $python benchmarks/train_throughput.py --device cuda --shapes base big --tokens 25000 --compile \
    --json "$results/train_throughput.json" 2>&1 | grep -v -i "warn" | tee "$results/train_throughput.txt"

echo; echo "== decode speed on CUDA"
if [ -f "$carry/model/model.pt" ]; then
    timeout 150 $python benchmarks/decode_speed.py "$carry/model" --sources "$carry/source.txt" \
        --references "$carry/reference.txt" --device cuda --precisions fp32 bf16 --beams 1 4 \
        --batch-sizes 64 256 --sentences 1000 2>&1 | tee "$results/decode_speed.txt"
else
    echo "no model in $carry/model (benchmarks/gpu_pack.sh packs one): skipped" | tee "$results/decode_speed.txt"
fi

echo; echo "== summary ($((SECONDS - begin)) s)"
$python benchmarks/gpu_summary.py "$results" "$tests_status"
