"""What a service replica decodes with: our own ``Translator``, or the model exported
to CTranslate2 (``stages/shared/inference/ctranslate2_translator.py``). Either runs in the
replica's decode process (``stages/shared/inference/decode_pool.py``), takes sources encoded by
``SourceEncoder`` and the request's ``SearchSettings``, and gives back the n best
``Translation``s per sentence.
"""

from __future__ import annotations

from pathlib import Path

from stages.shared.inference.ctranslate2_translator import CTranslate2Translator
from stages.shared.inference.translator import open_translator

BACKENDS = ("ours", "ctranslate2")


def open_backend(model_dir: Path, backend: str, device: str, threads: int, quantization: str | None = None,
                 precision: str = "auto"):
    """``backend``: "ours" (in ``precision``, resolved on the replica's device: ``auto`` is
    bf16 where the device runs it natively, as ``nmt translate``) or "ctranslate2"
    (``quantization`` is its weights' type). Called in the decode process."""
    if backend == "ctranslate2":
        return CTranslate2Translator(model_dir, device, threads, quantization)
    return open_translator(model_dir, device, precision)
