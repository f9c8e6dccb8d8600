"""A trained model as one self-describing file that loads without DeepSpeed or Ray.

``model.pt`` holds the family, preset and settings, the vocabulary facts the model
was built with (sizes, special and language-tag ids) and fp32 weights, so evaluation,
``nmt translate`` and export rebuild it with ``load_model_file`` alone. The train
stage writes it (``save_model_file``); ``ModelFiles`` finds it with the artifact's
``vocab.json`` and SentencePiece models, and ``SourceEncoder`` turns text into the ids
every decoder reads.

Loading checks what it loads: every file of a model (the weights, ``vocab.json``, the
SentencePiece models) is read only beside its artifact's ``MANIFEST.json``, and only if
it has the sha256 the manifest records for it (one flipped byte in the weights, or three
pieces renamed in ``spm.model``, otherwise load silently and translate wrongly); weights
that are NaN or infinite are refused (they would decode to nothing, or fail deep in the
search).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sentencepiece as spm

from stages.shared.models.spec import ModelSpec

if TYPE_CHECKING:  # torch is imported where a model is built or read, so that the file
    from torch import nn  # names and readers here load without it

# What translating with a trained model reads from its train artifact: the weights, the
# vocabulary and the SentencePiece model(s). Evaluation and ``nmt translate`` fetch only these.
MODEL_FILES = ("model.pt", "best.pt", "vocab.json", "*.model")


def weights_file(artifact: Path, which: str = "model") -> Path:
    """``model.pt`` (``which="model"``, the final averaged weights) or ``best.pt``
    (``which="best"``, the best validated ones) of a train artifact."""
    return artifact / f"{which}.pt"


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
    from stages.shared.models.build import build_model

    return build_model(spec.family, spec.preset, spec.settings, facts["src_vocab"], facts["tgt_vocab"],
                       tuple(facts["language_tag_ids"]), facts["special_ids"]["pad"])


def save_model_file(path: Path, spec: ModelSpec, facts: dict, state_dict: dict, info: dict) -> None:
    import torch

    torch.save({"spec": spec.model_dump(mode="json"), "vocabulary": facts,
                "state_dict": {name: tensor.float() for name, tensor in state_dict.items()}, "info": info}, path)


def load_model_file(path: Path, device: str = "cpu") -> tuple[nn.Module, dict]:
    """The model in eval mode, and the file's contents besides the weights."""
    import torch

    check_against_manifest(Path(path))
    try:
        data = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # torch raises what its unpickler met: name the file
        raise RuntimeError(f"{path}: not a model file that nmt-pipeline wrote ({type(error).__name__}: "
                           f"{error})") from error
    state_dict = data.pop("state_dict")
    broken = [name for name, tensor in state_dict.items()
              if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if broken:
        raise ModelFileError(f"{path}: {len(broken)} weight tensor(s) hold NaN or infinite values "
                             f"({', '.join(broken[:3])}{', ...' if len(broken) > 3 else ''}); "
                             "the model diverged or the file is damaged")
    model = build_for_vocabulary(ModelSpec.model_validate(data["spec"]), data["vocabulary"])
    model.load_state_dict(state_dict)
    return model.to(device).eval(), data


class ModelFileError(RuntimeError):
    """A weights file that must not be loaded: damaged, or not what its manifest records."""


def check_against_manifest(path: Path) -> None:
    """Raises ``ModelFileError`` unless the manifest of the train artifact beside
    ``path`` lists it with the sha256 it has: a model's files are read only from its
    artifact, as committed. A missing, unreadable or malformed manifest, or one that
    does not list the file, is refused as a changed one is, never loaded unchecked."""
    manifest_file = path.parent / "MANIFEST.json"
    todo = ("check the artifact with nmt verify CONFIG and retrain what it marks (nmt run --force train/MODEL), "
            "or give the train artifact's directory, where its MANIFEST.json is")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file of a model")
    try:
        manifest = json.loads(manifest_file.read_text())
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no {manifest_file.name} beside it, so its sha256 cannot be checked (a model "
                             f"file is loaded from its train artifact); {todo}") from None
    except (OSError, ValueError) as error:
        raise ModelFileError(f"{path}: {manifest_file} cannot be read as a manifest ({type(error).__name__}); "
                             f"{todo}") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    entry = files.get(path.name) if isinstance(files, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        raise ModelFileError(f"{path}: {manifest_file} does not list it with a sha256; {todo}")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != entry["sha256"]:
        raise ModelFileError(f"{path}: its sha256 does not match {manifest_file} (the file was changed or damaged "
                             "after training); retrain it (nmt run --force train/MODEL) or restore the file")


@dataclass(frozen=True)
class ModelFiles:
    """What a trained model is served from: its weights file, SentencePiece model(s)
    and special token ids, as the train artifact's ``vocab.json`` names them."""

    weights: Path
    src_spm: Path
    tgt_spm: Path
    special_ids: dict

    @classmethod
    def find(cls, model_file: Path) -> ModelFiles:
        """``model_file``: a model file (``model.pt``, ``best.pt``) or a train artifact
        directory, with the artifact's ``vocab.json`` and SentencePiece model(s) beside it."""
        model_file = Path(model_file)
        if model_file.is_dir():
            model_file = _model_in(model_file)
        if not model_file.is_file():
            raise FileNotFoundError(f"{model_file}: no model file (a train artifact holds model.pt and best.pt)")
        vocab_file = model_file.parent / "vocab.json"
        if not vocab_file.is_file():
            raise FileNotFoundError(f"{vocab_file}: missing; a model file is read with the vocab.json and "
                                    "SentencePiece models of its train artifact beside it")
        check_against_manifest(vocab_file)
        vocab = json.loads(vocab_file.read_text())
        models = vocab["models"]
        found = cls(model_file, model_file.parent / models["src"], model_file.parent / models["tgt"],
                    vocab["special_ids"])
        for tokenizer in dict.fromkeys((found.src_spm, found.tgt_spm)):  # one file where both sides share it
            check_against_manifest(tokenizer)
        return found


def _model_in(directory: Path) -> Path:
    """The ``model.pt`` of a train artifact directory, or of the one train artifact a
    stage's folder holds (``artifacts/train/NAME``: one directory per key); a folder of
    several is refused naming them, newest first."""
    if (directory / "model.pt").is_file() or not directory.is_dir():
        return directory / "model.pt"
    keyed = sorted((child for child in directory.iterdir() if (child / "model.pt").is_file()),
                   key=lambda child: (child / "model.pt").stat().st_mtime, reverse=True)
    if len(keyed) == 1:
        return keyed[0] / "model.pt"
    if keyed:
        raise FileNotFoundError(f"{directory} holds {len(keyed)} trained models, one per set of settings: name one "
                                f"of {', '.join(str(child) for child in keyed)} (newest first)")
    return directory / "model.pt"


class SourceEncoder:
    """Sentences to the token ids every decoder reads: the source SentencePiece model's
    ids, then EOS, as the tokenize stage encoded the training data. Loads no weights, so
    that a service replica's request handler can check lengths cheaply."""

    def __init__(self, processor: spm.SentencePieceProcessor, eos_id: int):
        self.processor, self.eos_id = processor, eos_id

    @classmethod
    def of(cls, files: ModelFiles) -> SourceEncoder:
        return cls(spm.SentencePieceProcessor(model_file=str(files.src_spm)), files.special_ids["eos"])

    def encode(self, sentences: list[str]) -> list[list[int]]:
        return [ids + [self.eos_id] for ids in self.processor.encode(sentences, out_type=int)]
