"""A trained model as a CTranslate2 model directory, by its family's converter
(``ModelFamily.ctranslate2``: the Transformer as a ``TransformerSpec``, the decoder-only
model as a ``TransformerDecoderModelSpec``).

CTranslate2 reads tokens as strings: the vocabulary is the SentencePiece model's pieces
in id order, so piece i is our token id i.
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm
from torch import nn

from stages.shared.models.families import FAMILIES, family_of

# What the export writes beside the model: how to call it (for nmt serve and people).
EXPORT_INFO = "nmt_export.json"


def write_ctranslate2(model: nn.Module, data: dict, files, output: Path, quantization: str | None) -> None:
    from ctranslate2.converters.converter import Converter

    family = family_of(model)  # export_model checked that CTranslate2 can run it
    src_pieces, tgt_pieces = pieces(files.src_spm), pieces(files.tgt_spm)
    spec = family.ctranslate2.spec(model, src_pieces, tgt_pieces, data["vocabulary"]["special_ids"])

    class TrainedModel(Converter):  # the converter API: validate, quantize, save
        def _load(self):
            return spec

    TrainedModel().convert(str(output), quantization=quantization, force=True)
    for path in {files.src_spm, files.tgt_spm}:
        (output / path.name).write_bytes(path.read_bytes())
    info = {"format": "ctranslate2", "family": family.name, "engine": family.ctranslate2.engine,
            "quantization": quantization or "float32",
            "source": str(files.weights), "src_spm": files.src_spm.name, "tgt_spm": files.tgt_spm.name,
            "special_ids": data["vocabulary"]["special_ids"],
            "max_positions": getattr(model.config, "max_positions", None)}
    if family.ctranslate2.engine == "generator":
        # A Generator continues a prompt: <src-tag> source </s> <tgt-tag>, as the model was trained.
        info["prompt"] = {"before_source": [src_pieces[model.src_tag_id]],
                          "after_source": ["</s>", src_pieces[model.tgt_tag_id]]}
    (output / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")


def pieces(spm_file: Path) -> list[str]:
    processor = spm.SentencePieceProcessor(model_file=str(spm_file))
    return [processor.id_to_piece(index) for index in range(processor.get_piece_size())]


def ctranslate2_refusal(model: nn.Module) -> str | None:
    """Why the ctranslate2 format cannot hold this model (its family has no CTranslate2
    converter, or the model a setting CTranslate2 lacks), or None: checked before any work."""
    family = family_of(model)
    if family.ctranslate2 is None:
        runs = ", ".join(f.name for f in FAMILIES if f.ctranslate2 is not None)
        return (f"the ctranslate2 format does not support the {family.name} family: CTranslate2 has no converter "
                f"for it (the families it runs: {runs})")
    reason = family.ctranslate2.refuses(model)
    return f"the ctranslate2 format does not support {reason}" if reason else None

