"""Text in, text out: a trained model with its SentencePiece model(s).

The evaluate stage, the train stage's validation BLEU, ``nmt translate`` and ``nmt
serve`` all translate through ``Translator``, so what the report scores is what a user
gets. Sources are encoded as the tokenize stage encoded training data (SentencePiece
ids, then EOS), sorted by length and decoded in batches of similar length, and the
hypotheses come back in input order, detokenized.
A blank line translates to a blank line without running the model.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sentencepiece as spm
import torch
from torch.nn.utils.rnn import pad_sequence

from pipeline.core.hardware import detect_device, resolve_precision
from pipeline.core.host_memory import keep_freed_memory
from stages.shared.inference.beam import Hypothesis, beam_search, model_positions
from stages.shared.inference.decode_pool import DecodePool
from stages.shared.inference.model_file import ModelFiles, SourceEncoder, load_model_file
from stages.shared.inference.search import DEFAULT_SEARCH, SearchSettings
from stages.shared.models.protocol import TranslationModel


@dataclass(frozen=True)
class Translation:
    text: str
    hypothesis: Hypothesis  # tokens, log-probability and length-penalized score


class Translator:
    def __init__(self, model: TranslationModel, src_spm: spm.SentencePieceProcessor,
                 tgt_spm: spm.SentencePieceProcessor, special_ids: dict, device: str = "cpu",
                 precision: str = "fp32"):
        """A model in memory with its SentencePiece models: what the train loop's
        validation BLEU decodes with. ``precision``: fp32, or bf16/fp16 autocast, already
        resolved (``pipeline.core.hardware``)."""
        self.model, self.src_spm, self.tgt_spm = model, src_spm, tgt_spm
        self.device, self.precision = device, precision
        self.pad_id, self.bos_id, self.eos_id = special_ids["pad"], special_ids["bos"], special_ids["eos"]
        self.encoder = SourceEncoder(src_spm, self.eos_id)
        self.positions = model_positions(model)  # bounds the output length (beam.max_output_lengths)

    @classmethod
    def from_file(cls, model_file: Path, device: str = "cpu", precision: str = "fp32") -> Translator:
        """``model_file``: a train artifact's ``model.pt`` (or ``best.pt``), or the artifact
        directory, with the artifact's ``vocab.json`` and SentencePiece model(s) beside it.

        A process that loads a model to translate keeps the memory it frees
        (``pipeline.core.host_memory``): each search step's vocabulary-sized tensors then
        reuse the last step's pages instead of faulting in new ones."""
        files = ModelFiles.find(model_file)
        keep_freed_memory()
        model, data = load_model_file(files.weights, device)
        return cls(model, spm.SentencePieceProcessor(model_file=str(files.src_spm)),
                   spm.SentencePieceProcessor(model_file=str(files.tgt_spm)),
                   data["vocabulary"]["special_ids"], device, precision)

    name = "ours"  # as a decode pool's engine (decode_pool.py)

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self.encoder.encode(lines)

    def decode(self, tokens: tuple[int, ...]) -> str:
        return self.tgt_spm.decode(list(tokens))

    def translate(self, lines: list[str], search: SearchSettings = DEFAULT_SEARCH, batch_size: int = 64,
                  on_batch: Callable[[int], None] | None = None, pool: DecodePool | None = None,
                  engine=None) -> list[list[Translation]]:
        """The ``search.nbest`` best translations of every line, in input order;
        ``on_batch`` is told how many lines each finished batch held (a progress bar).
        With ``pool``, the batches decode in its processes, several at a time; with
        ``engine`` (a ``CTranslate2Translator``), by its ``translate_batch`` instead of
        ours, the sources encoded and batched the same."""
        results: list[list[Translation]] = [[Translation("", Hypothesis((), 0.0, 0.0))] for _ in lines]
        present = [index for index, line in enumerate(lines) if line.strip()]
        translated = self.translate_ids(self.encode([lines[index] for index in present]), search, batch_size,
                                        on_batch, pool, engine)
        for index, translations in zip(present, translated):
            results[index] = translations
        if on_batch is not None and len(present) < len(lines):
            on_batch(len(lines) - len(present))  # the blank lines
        return results

    def translate_ids(self, sources: list[list[int]], search: SearchSettings = DEFAULT_SEARCH,
                      batch_size: int = 64, on_batch: Callable[[int], None] | None = None,
                      pool: DecodePool | None = None, engine=None) -> list[list[Translation]]:
        """The same for sources already encoded (token ids ending with EOS), none empty."""
        results: list[list[Translation]] = [[] for _ in sources]
        by_length = sorted(range(len(sources)), key=lambda index: -len(sources[index]))
        chunks = [by_length[start:start + batch_size] for start in range(0, len(by_length), batch_size)]
        batches = ([sources[index] for index in chunk] for chunk in chunks)
        translate_batch = (engine or self).translate_batch
        translated = (pool.map(batches, search) if pool is not None
                      else (translate_batch(batch, search) for batch in batches))
        for chunk, translations_of_batch in zip(chunks, translated):
            for index, translations in zip(chunk, translations_of_batch):
                results[index] = translations
            if on_batch is not None:
                on_batch(len(chunk))
        return results

    def translate_batch(self, sources: list[list[int]], search: SearchSettings) -> list[list[Translation]]:
        """One batch of encoded sentences, searched and detokenized: what a decode pool's
        process runs (``decode_pool.Engine``)."""
        return [[Translation(self.decode(h.tokens), h) for h in hypotheses]
                for hypotheses in self.search_batch(sources, search)]

    def search_batch(self, sources: list[list[int]], search: SearchSettings) -> list[list[Hypothesis]]:
        """Beam search over one batch of encoded sentences."""
        src = pad_sequence([torch.tensor(ids) for ids in sources], batch_first=True, padding_value=self.pad_id)
        with self._autocast():
            return beam_search(self.model, src.to(self.device), search.beam_size, bos_id=self.bos_id,
                               eos_id=self.eos_id, pad_id=self.pad_id, length_penalty=search.length_penalty,
                               max_length_a=search.max_length_a, max_length_b=search.max_length_b,
                               min_length=search.min_length, nbest=search.nbest)

    def _autocast(self):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype)


def open_translator(model_file: Path, device: str = "cpu", precision: str = "auto") -> Translator:
    """``Translator.from_file`` with ``precision`` (``auto`` included) resolved on this
    process's device: what a decode pool's processes and ``nmt translate`` load."""
    return Translator.from_file(model_file, device, resolve_precision(precision, detect_device(device), "precision"))
