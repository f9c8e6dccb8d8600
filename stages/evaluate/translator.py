"""Text in, text out: a trained model with its SentencePiece model(s).

The evaluate stage and ``nmt translate`` both translate through ``Translator``, so
what the report scores is what a user gets. Sources are encoded as the tokenize stage
encoded training data (SentencePiece ids, then EOS), sorted by length and decoded in
batches of similar length, and the hypotheses come back in input order, detokenized.
A blank line translates to a blank line without running the model.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sentencepiece as spm
import torch
from torch.nn.utils.rnn import pad_sequence

from pipeline.host_memory import keep_freed_memory
from stages.evaluate.beam import Hypothesis, beam_search
from stages.evaluate.decode_workers import DecodeWorkers
from stages.train.model_file import load_model_file


@dataclass(frozen=True)
class SearchSettings:
    beam_size: int = 4
    length_penalty: float = 0.6  # alpha
    max_length_a: float = 1.0
    max_length_b: int = 50
    min_length: int = 1
    nbest: int = 1


@dataclass(frozen=True)
class Translation:
    text: str
    hypothesis: Hypothesis  # tokens, log-probability and length-penalized score


@dataclass(frozen=True)
class ModelFiles:
    """What a trained model is served from: its weights file and SentencePiece model(s)."""

    weights: Path
    src_spm: Path
    tgt_spm: Path

    @classmethod
    def find(cls, model_file: Path) -> ModelFiles:
        """``model_file``: a model file (``model.pt``, ``best.pt``) or a train artifact
        directory, with the artifact's ``vocab.json`` and SentencePiece model(s) beside it."""
        model_file = Path(model_file)
        if model_file.is_dir():
            model_file = model_file / "model.pt"
        if not model_file.is_file():
            raise FileNotFoundError(f"{model_file}: no model file (a train artifact holds model.pt and best.pt)")
        vocab_file = model_file.parent / "vocab.json"
        if not vocab_file.is_file():
            raise FileNotFoundError(f"{vocab_file}: missing; a model file is read with the vocab.json and "
                                    "SentencePiece models of its train artifact beside it")
        models = json.loads(vocab_file.read_text())["models"]
        return cls(model_file, model_file.parent / models["src"], model_file.parent / models["tgt"])


class Translator:
    def __init__(self, model: torch.nn.Module, src_spm: spm.SentencePieceProcessor,
                 tgt_spm: spm.SentencePieceProcessor, special_ids: dict, device: str = "cpu",
                 precision: str = "fp32"):
        """A model in memory with its SentencePiece models: what the train loop's
        validation BLEU decodes with. ``precision``: fp32, or bf16/fp16 autocast, already
        resolved (``pipeline.hardware``)."""
        self.model, self.src_spm, self.tgt_spm = model, src_spm, tgt_spm
        self.device, self.precision = device, precision
        self.pad_id, self.bos_id, self.eos_id = special_ids["pad"], special_ids["bos"], special_ids["eos"]

    @classmethod
    def from_file(cls, model_file: Path, device: str = "cpu", precision: str = "fp32") -> Translator:
        """``model_file``: a train artifact's ``model.pt`` (or ``best.pt``), or the artifact
        directory, with the artifact's ``vocab.json`` and SentencePiece model(s) beside it.

        A process that loads a model to translate keeps the memory it frees
        (``pipeline.host_memory``): each search step's vocabulary-sized tensors then
        reuse the last step's pages instead of faulting in new ones."""
        files = ModelFiles.find(model_file)
        keep_freed_memory()
        model, data = load_model_file(files.weights, device)
        return cls(model, spm.SentencePieceProcessor(model_file=str(files.src_spm)),
                   spm.SentencePieceProcessor(model_file=str(files.tgt_spm)),
                   data["vocabulary"]["special_ids"], device, precision)

    def encode(self, lines: list[str]) -> list[list[int]]:
        return [ids + [self.eos_id] for ids in self.src_spm.encode(lines, out_type=int)]

    def decode(self, tokens: tuple[int, ...]) -> str:
        return self.tgt_spm.decode(list(tokens))

    def translate(self, lines: list[str], search: SearchSettings = SearchSettings(), batch_size: int = 64,
                  on_batch: Callable[[int], None] | None = None,
                  workers: DecodeWorkers | None = None) -> list[list[Translation]]:
        """The ``search.nbest`` best translations of every line, in input order;
        ``on_batch`` is told how many lines each finished batch held (a progress bar).
        With ``workers``, the batches decode there, several at a time."""
        results: list[list[Translation]] = [[Translation("", Hypothesis((), 0.0, 0.0))] for _ in lines]
        present = [index for index, line in enumerate(lines) if line.strip()]
        translated = self.translate_ids(self.encode([lines[index] for index in present]), search, batch_size,
                                        on_batch, workers)
        for index, translations in zip(present, translated):
            results[index] = translations
        if on_batch is not None and len(present) < len(lines):
            on_batch(len(lines) - len(present))  # the blank lines
        return results

    def translate_ids(self, sources: list[list[int]], search: SearchSettings = SearchSettings(),
                      batch_size: int = 64, on_batch: Callable[[int], None] | None = None,
                      workers: DecodeWorkers | None = None) -> list[list[Translation]]:
        """The same for sources already encoded (token ids ending with EOS), none empty."""
        results: list[list[Translation]] = [[] for _ in sources]
        by_length = sorted(range(len(sources)), key=lambda index: -len(sources[index]))
        chunks = [by_length[start:start + batch_size] for start in range(0, len(by_length), batch_size)]
        batches = ([sources[index] for index in chunk] for chunk in chunks)
        searched = (workers.search(batches, search) if workers is not None
                    else (self.search_batch(batch, search) for batch in batches))
        for chunk, hypotheses_of_batch in zip(chunks, searched):
            for index, hypotheses in zip(chunk, hypotheses_of_batch):
                results[index] = [Translation(self.decode(h.tokens), h) for h in hypotheses]
            if on_batch is not None:
                on_batch(len(chunk))
        return results

    def search_batch(self, sources: list[list[int]], search: SearchSettings) -> list[list[Hypothesis]]:
        """Beam search over one batch of encoded sentences."""
        src = pad_sequence([torch.tensor(ids) for ids in sources], batch_first=True, padding_value=self.pad_id)
        with self._autocast():
            return beam_search(self.model, src.to(self.device), search.beam_size, bos_id=self.bos_id,
                               eos_id=self.eos_id, pad_id=self.pad_id, alpha=search.length_penalty,
                               max_length_a=search.max_length_a, max_length_b=search.max_length_b,
                               min_length=search.min_length, nbest=search.nbest)

    def _autocast(self):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype)
