"""What an evaluate artifact says of its decodes, for other modules (the report, ``nmt
report``): ``EvalSummary``, the record the stage writes as ``scores.json`` and its
manifest's ``metrics``, whose scores per decode are ``DecodeScores``. Torch-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.records import load, nested, optional

SCORES_FILE = "scores.json"


@dataclass(kw_only=True)
class DecodeScores:
    """One decode of the split (beam, greedy or CTranslate2's beam) scored by sacreBLEU.

    ``bleu`` is the headline: cased, on detokenized text, 13a-tokenized inside sacreBLEU.
    ``bleu_lc`` is the same lowercased (``sacrebleu -lc``), the kind most Multi30k papers
    report, so ours can be held against theirs; its signature says ``case:lc``."""

    bleu: float
    bleu_lc: float
    bleu_lc_signature: str
    chrf: float
    bleu_signature: str
    chrf_signature: str
    mean_score: float  # the mean length-penalized model score of the best hypotheses
    decode_seconds: float  # decoding only, model loading excluded, summed over the tasks
    sentences_per_second: float
    tokens_per_second: float  # generated tokens, EOS included


@dataclass(kw_only=True)
class EvalSummary:
    """An evaluation's settings, hardware, scores, and what the report's translation gate
    reads; its fields in the order written. Greedy and CTranslate2's scores are written
    flat under ``greedy_`` and ``ctranslate2_`` (``greedy_bleu``)."""

    split: str
    sentences: int
    beam_size: int
    length_penalty: float
    decode_wall_seconds: float
    # Each task's resolved precision and device; comma-separated where tasks differ.
    precision: str | None = None
    device: str | None = None
    device_name: str | None = None
    device_capability: str | None = None
    threads: int | str | None = None
    beam: DecodeScores = nested("", DecodeScores, required=True)
    decode_flops_per_sentence: float | None = optional()  # of the beam search (stages/shared/models/flops.py)
    # How collapsed the beam outputs are (stages/shared/output_collapse.py).
    top_output_share: float | None = optional()
    top_output: str | None = optional()
    distinct_output_share: float | None = optional()
    # The model's source use on the validation split (translation_check.py), or why not measured.
    valid_nll: float | None = optional()
    valid_nll_other_source: float | None = optional()
    source_use: float | None = None
    source_use_error: float | None = optional()  # its standard error over the sentences
    source_use_sentences: int | None = optional()
    source_use_skipped: str | None = optional()
    greedy: DecodeScores | None = nested("greedy_", DecodeScores)  # evaluate.greedy
    ctranslate2_weights: str | None = optional()  # evaluate.ctranslate2
    ctranslate2_skipped: str | None = optional()  # why CTranslate2 did not decode
    ctranslate2: DecodeScores | None = nested("ctranslate2_", DecodeScores)


def load_scores(metrics: dict, source: str) -> EvalSummary:
    """An evaluate stage's ``metrics`` as an ``EvalSummary``; ``RecordError`` naming
    ``source`` and the field if one is missing or unknown."""
    return load(EvalSummary, metrics, source)


def read_scores(artifact: Path) -> EvalSummary:
    """``scores.json`` of an evaluate artifact."""
    return load_scores(json.loads((artifact / SCORES_FILE).read_text()), str(artifact / SCORES_FILE))
