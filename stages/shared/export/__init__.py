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

``--force`` replaces only what an earlier export wrote: a directory holding the marker
file ``EXPORT_MARKER`` that every export leaves. Never the working directory, one of
its parents, or the directory of the model being exported; the earlier export is moved
aside and removed only once the new one is in place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

FORMATS = ("ctranslate2", "huggingface")
# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")


# Written into every export: what --force may replace.
EXPORT_MARKER = ".nmt-export.json"


class ExportError(ValueError):
    """The model cannot be exported as asked: the message says why and what can be."""


def check_replaceable(output: Path, model_dir: Path) -> None:
    """Raises unless ``output`` is a directory an earlier export wrote, and none that a
    user works in: the working directory, a parent of it, or the model's directory."""
    target, here, model_dir = output.resolve(), Path.cwd().resolve(), model_dir.resolve()
    if target == here or target in here.parents:
        raise ExportError(f"{output}: --force never replaces the working directory or a parent of it")
    if target == model_dir or target in model_dir.parents:
        raise ExportError(f"{output}: --force never replaces the directory of the model being exported")
    if not (output.is_dir() and (output / EXPORT_MARKER).is_file()):
        raise ExportError(f"{output} exists and is not an earlier export (no {EXPORT_MARKER} in it): "
                          "--force replaces only what nmt export wrote; pick another directory")


def export_model(model_file: Path, format: str, output: Path, quantization: str | None = None,
                 force: bool = False) -> Path:
    """Export the model at ``model_file`` (a model file or a train artifact directory) to
    ``output`` in ``format``; ``quantization`` for CTranslate2 only."""
    from stages.shared.inference.model_file import ModelFiles, load_model_file

    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}: choose one of {', '.join(FORMATS)}")
    if quantization is not None and format != "ctranslate2":
        raise ExportError(f"--quantization applies to the ctranslate2 format, not {format}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    output = Path(output)
    files = ModelFiles.find(model_file)
    if output.exists() or output.is_symlink():
        if not force:
            raise ExportError(f"{output} already exists: pick another directory or pass --force")
        check_replaceable(output, files.weights.parent)
    model, data = load_model_file(files.weights)
    check_format(model, format)
    existing = next(parent for parent in output.parents if parent.exists() or parent == Path(parent.anchor))
    if existing.exists() and not existing.is_dir():  # mkdir would raise FileExistsError, a traceback
        raise ExportError(f"{output}: {existing} is a file, not a directory: pick another output directory")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        if format == "ctranslate2":
            from stages.shared.export.ctranslate2 import write_ctranslate2

            write_ctranslate2(model, data, files, staging, quantization)
        else:
            from stages.shared.export.marian import write_marian

            write_marian(model, data, files, staging)
        (staging / EXPORT_MARKER).write_text(json.dumps({"format": format, "quantization": quantization,
                                                         "model": str(files.weights.resolve())}) + "\n")
        _move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output


def check_format(model, format: str) -> None:
    """Raise ExportError, before anything is written, where ``format`` cannot hold
    ``model``: the reason, and the formats that can."""
    try:
        _check(model, format)
    except ExportError as error:
        holding = [other for other in FORMATS if other != format and _holds(model, other)]
        raise ExportError(f"{error}; formats that hold this model: {', '.join(holding) or 'none'}") from None


def _check(model, format: str) -> None:
    if format == "ctranslate2":
        from stages.shared.export.ctranslate2 import ctranslate2_refusal

        refusal = ctranslate2_refusal(model)
        if refusal:
            raise ExportError(refusal)
    else:
        from stages.shared.export.marian import check_exportable

        check_exportable(model)


def _holds(model, format: str) -> bool:
    try:
        _check(model, format)
    except ExportError:
        return False
    return True


def _move_into_place(staging: Path, output: Path) -> None:
    """``staging`` renamed to ``output``; an earlier export there is moved aside first
    and removed only once the new one is in place (put back if the rename fails)."""
    if not output.exists():
        staging.rename(output)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{output.name}.replaced.", dir=output.parent))
    os.rmdir(aside)  # a name of our own beside the output, for the rename
    output.rename(aside)
    try:
        staging.rename(output)
    except BaseException:
        aside.rename(output)
        raise
    shutil.rmtree(aside, ignore_errors=True)
