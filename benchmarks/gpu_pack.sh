#!/usr/bin/env bash
# Packs what benchmarks/gpu_check.sh needs on a lent GPU machine into .gpu_carry/
# (git-ignored), run here, where pip reaches the package registry. The GPU image has
# torch, transformers, sentencepiece, sacrebleu, pyarrow, pandas and pytest, but no
# deepspeed, pydantic or ray, and nothing can be downloaded there.
#
#   bash benchmarks/gpu_pack.sh [TRAIN_ARTIFACT_DIR]
#
# TRAIN_ARTIFACT_DIR: a trained model (model.pt, vocab.json, *.model) for the decode
# table; default: the newest transformer that the default job trained into ./artifacts.
# Then, with the device tool: run `bash benchmarks/gpu_check.sh` carrying .gpu_carry.
set -euo pipefail
cd "$(dirname "$0")/.."
carry=.gpu_carry
rm -rf "$carry" && mkdir -p "$carry/wheels" "$carry/corpora" "$carry/model"

# DeepSpeed builds as a pure-Python wheel (its CUDA ops compile on first use, and we
# use none of them); its needs that the image lacks come as cp312 manylinux wheels.
python3 -m pip wheel --quiet --no-deps --no-build-isolation -w "$carry/wheels" \
    "deepspeed==$(python3 -c 'import importlib.metadata as m; print(m.version("deepspeed"))')"
pins=()
for name in pydantic pydantic_core annotated_types typing_inspection hjson; do
    version=$(python3 -c "import importlib.metadata as m; print(m.version('${name//_/-}'))")
    pins+=("${name//_/-}==$version")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$carry/wheels" "${pins[@]}"

# The corpus the tests' fixtures build their artifacts from (1.9 MB).
cp -r "${NMT_CORPORA:-../shared/corpora}/multi30k" "$carry/corpora/"

model=${1:-}
if [ -z "$model" ]; then
    model=$(ls -td artifacts/train/transformer_*/*/ 2>/dev/null | head -1 || true)
fi
if [ -n "$model" ] && [ -f "$model/model.pt" ]; then
    cp "$model"/model.pt "$model"/vocab.json "$model"/*.model "$carry/model/"
    python3 - "$carry" <<'PY'
import gzip, sys
from pathlib import Path
carry = Path(sys.argv[1])
corpus = carry / "corpora" / "multi30k"
for side, name in (("en", "source.txt"), ("de", "reference.txt")):
    lines = gzip.open(corpus / f"test_2016_flickr.{side}.gz", "rt", encoding="utf-8").read().splitlines()
    (carry / name).write_text("\n".join(lines) + "\n")
PY
else
    echo "no trained model found (give a train artifact directory): the decode table will be skipped"
    rmdir "$carry/model"
fi
du -sh "$carry"
ls "$carry"/wheels
