"""A trained model as one self-describing file that loads without DeepSpeed or Ray.

``model.pt`` holds the family, preset and settings, the vocabulary facts the model
was built with (sizes, special and language-tag ids) and fp32 weights, so evaluation,
``nmt translate`` and export rebuild it with ``load_model_file`` alone.
"""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm
import torch
from torch import nn

from stages.train.config import ModelSpec
from stages.train.models import build_model


def vocabulary_facts(tokenized: Path, vocab: dict) -> dict:
    """Sizes, special ids and the ids of the language tags (decoder-only models need them)."""
    processor = spm.SentencePieceProcessor(model_file=str(tokenized / vocab["models"]["src"]))
    tags = vocab.get("language_tags") or {}
    tag_ids = [processor.piece_to_id(tags[lang]) if lang in tags else vocab["special_ids"]["unk"]
               for lang in (vocab["src_lang"], vocab["tgt_lang"])]
    return {"src_vocab": vocab["sizes"]["src"], "tgt_vocab": vocab["sizes"]["tgt"],
            "special_ids": vocab["special_ids"], "language_tag_ids": tag_ids,
            "src_lang": vocab["src_lang"], "tgt_lang": vocab["tgt_lang"]}


def build_for_vocabulary(spec: ModelSpec, facts: dict) -> nn.Module:
    return build_model(spec.family, spec.preset, spec.settings, facts["src_vocab"], facts["tgt_vocab"],
                       tuple(facts["language_tag_ids"]), facts["special_ids"]["pad"])


def save_model_file(path: Path, spec: ModelSpec, facts: dict, state_dict: dict, info: dict) -> None:
    torch.save({"spec": spec.model_dump(mode="json"), "vocabulary": facts,
                "state_dict": {name: tensor.float() for name, tensor in state_dict.items()}, "info": info}, path)


def load_model_file(path: Path, device: str = "cpu") -> tuple[nn.Module, dict]:
    """The model in eval mode, and the file's contents besides the weights."""
    try:
        data = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # torch raises what its unpickler met: name the file
        raise RuntimeError(f"{path}: not a model file that nmt-pipeline wrote ({type(error).__name__}: "
                           f"{error})") from error
    model = build_for_vocabulary(ModelSpec.model_validate(data["spec"]), data["vocabulary"])
    model.load_state_dict(data.pop("state_dict"))
    return model.to(device).eval(), data
