"""Trained models out of the pipeline, into the formats people ship and share them in.

- ``ctranslate2``: the inference engine MT teams deploy with (``ctranslate2.Translator``
  for the Transformer, ``ctranslate2.Generator`` for the decoder-only model), built
  through CTranslate2's own model spec and converter API, quantized if asked;
- ``huggingface``: a ``MarianMTModel`` and ``MarianTokenizer`` directory that
  ``transformers`` loads offline (the post-LN Transformer with sinusoidal positions:
  the architecture Marian has).

Each export maps the trained weights exactly: tests check that the exported model's
greedy translations are ours. The SentencePiece model(s) go along, so the directory is
all a user needs. An export is written beside its destination and moved into place
whole, so a failed one leaves nothing that looks finished.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

FORMATS = ("ctranslate2", "huggingface")
# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")


class ExportError(ValueError):
    """The model cannot be exported as asked: the message says why and what can be."""


def export_model(model_file: Path, format: str, output: Path, quantization: str | None = None,
                 force: bool = False) -> Path:
    """Export the model at ``model_file`` (a model file or a train artifact directory) to
    ``output`` in ``format``; ``quantization`` for CTranslate2 only."""
    from stages.inference.model_file import ModelFiles, load_model_file

    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}: choose one of {', '.join(FORMATS)}")
    if quantization is not None and format != "ctranslate2":
        raise ExportError(f"--quantization applies to the ctranslate2 format, not {format}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    output = Path(output)
    if output.exists() and not force:
        raise ExportError(f"{output} already exists: pick another directory or pass --force")
    files = ModelFiles.find(model_file)
    model, data = load_model_file(files.weights)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        if format == "ctranslate2":
            from stages.export.ctranslate2 import write_ctranslate2

            write_ctranslate2(model, data, files, staging, quantization)
        else:
            from stages.export.marian import write_marian

            write_marian(model, data, files, staging)
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output
