"""BLEU during training: decode the validation split and a fixed sample of training
pairs with the model as it is, and score both with sacreBLEU.

The loss says how well the model predicts the next token under teacher forcing; BLEU
says how well it translates, which is what early stopping and ``best.pt`` should
follow once the loss keeps falling while translations stop improving (label
smoothing and overfitting both decouple the two). The training-pair curve beside the
validation curve shows overfitting directly.

Sources are the tokenized ids (EOS included); references are the target ids decoded
by the target SentencePiece model, so the text scored is the normalized text that
training saw. Each worker decodes every ``world``-th sentence and rank 0's gather
restores the order, so a run with several workers costs each a fraction.

A run that trains under bf16 or fp16 autocast decodes in whichever of that precision and
fp32 is faster for its model on its device, measured at its first BLEU validation
(``fastest_precision``): autocast does not make small models decode faster (on an H100,
beam search in bf16 ran at 0.25x of fp32's rate for the tiny Transformer and 0.55-0.68x
for the Wu et al. model: docs/training.md), and which wins depends on the model and the
device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch.distributed as dist
from sacrebleu.metrics import BLEU, CHRF

from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator
from stages.shared.models.protocol import TranslationModel
from stages.train.config import TrainConfig
from stages.train.data import TokenizedSplit


# The valid split's first sentences each precision decodes, timed, at the first BLEU
# validation (after an untimed pass over the first few): enough to time a batch, a
# fraction of a validation.
PROBE_SENTENCES = 32
WARM_UP_SENTENCES = 4


@dataclass(frozen=True)
class BleuSample:
    name: str  # "valid" or "train": the prefix of the logged metrics
    sources: list[list[int]]  # token ids, EOS included
    references: list[str]


def bleu_samples(train_split: TokenizedSplit, valid_split: TokenizedSplit, training: TrainConfig,
                 tgt_spm: spm.SentencePieceProcessor, eos_id: int) -> list[BleuSample]:
    """The valid split's first ``valid_bleu_sentences`` pairs (or all), and a random but
    fixed (seeded) subset of ``train_bleu_sentences`` training pairs."""
    valid_count = min(len(valid_split), training.valid_bleu_sentences or len(valid_split))
    chosen = {"valid": (valid_split, np.arange(valid_count))}
    train_count = min(len(train_split), training.train_bleu_sentences)
    if train_count:
        rng = np.random.default_rng(training.seed)
        chosen["train"] = (train_split, np.sort(rng.choice(len(train_split), train_count, replace=False)))
    samples = []
    for name, (split, indices) in chosen.items():
        references = [tgt_spm.decode(_without_eos(ids, eos_id)) for ids in split.token_ids("tgt", indices)]
        samples.append(BleuSample(name, split.token_ids("src", indices), references))
    return samples


def _without_eos(ids: list[int], eos_id: int) -> list[int]:
    return ids[:-1] if ids and ids[-1] == eos_id else ids


class BleuValidator:
    """Decodes the samples with a model and returns sacreBLEU's BLEU and chrF of each."""

    def __init__(self, tokenized: Path, train_split: TokenizedSplit, valid_split: TokenizedSplit,
                 training: TrainConfig, device: str, precision: str, rank: int, world: int):
        vocab = train_split.vocab
        self.src_spm = spm.SentencePieceProcessor(model_file=str(tokenized / vocab["models"]["src"]))
        self.tgt_spm = spm.SentencePieceProcessor(model_file=str(tokenized / vocab["models"]["tgt"]))
        self.special_ids, self.device, self.run_precision = vocab["special_ids"], device, precision
        self.samples = bleu_samples(train_split, valid_split, training, self.tgt_spm, self.special_ids["eos"])
        self.search = SearchSettings(beam_size=training.valid_bleu_beam)
        self.batch_size, self.rank, self.world = training.valid_bleu_batch_size, rank, world
        # The precision decoding runs in: fp32 for an fp32 run, else chosen at the first call.
        self.precision: str | None = "fp32" if precision == "fp32" else None
        self.probe_seconds: dict[str, float] = {}  # each candidate's timed decode of the probe

    def __call__(self, model: TranslationModel) -> dict:
        """``{valid,train}_{bleu,chrf}`` and the seconds spent decoding; the model is
        put in eval mode and left so (the caller restores training mode)."""
        model.eval()
        if self.precision is None:
            self.precision = self.fastest_precision(model)
        translator = self._translator(model, self.precision)
        started, scores = time.perf_counter(), {}
        for sample in self.samples:
            hypotheses = self._decode(translator, sample.sources)
            scores[f"{sample.name}_bleu"] = BLEU().corpus_score(hypotheses, [sample.references]).score
            scores[f"{sample.name}_chrf"] = CHRF().corpus_score(hypotheses, [sample.references]).score
        scores["bleu_decode_seconds"] = time.perf_counter() - started
        return scores

    def fastest_precision(self, model: TranslationModel) -> str:
        """The run's autocast precision or fp32, whichever decodes the valid split's first
        ``PROBE_SENTENCES`` faster, each timed after an untimed pass over a few of them
        (kernels chosen, caches warm). Decoding returns text, so the device has finished
        when the clock stops. Rank 0's choice is every worker's."""
        sources = self.samples[0].sources[:PROBE_SENTENCES]
        for candidate in (self.run_precision, "fp32"):
            translator = self._translator(model, candidate)
            translator.translate_ids(sources[:WARM_UP_SENTENCES], self.search, self.batch_size)
            started = time.perf_counter()
            translator.translate_ids(sources, self.search, self.batch_size)
            self.probe_seconds[candidate] = time.perf_counter() - started
        fastest = [min(self.probe_seconds, key=self.probe_seconds.get)]
        if self.world > 1 and dist.is_initialized():
            dist.broadcast_object_list(fastest, src=0)
        return fastest[0]

    def _translator(self, model: TranslationModel, precision: str) -> Translator:
        return Translator(model, self.src_spm, self.tgt_spm, self.special_ids, self.device, precision)

    def _decode(self, translator: Translator, sources: list[list[int]]) -> list[str]:
        """Every sentence's best hypothesis, in order: each worker decodes every
        ``world``-th sentence and the shares are gathered."""
        mine = translator.translate_ids(sources[self.rank::self.world], self.search, self.batch_size)
        texts = [line[0].text for line in mine]
        if self.world == 1 or not dist.is_initialized():
            return texts
        shares: list = [None] * self.world
        dist.all_gather_object(shares, texts)
        ordered = [""] * len(sources)
        for rank, share in enumerate(shares):
            ordered[rank::self.world] = share
        return ordered
