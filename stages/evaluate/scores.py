"""Scoring decoded translations with sacreBLEU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sacrebleu.metrics import BLEU, CHRF

from stages.evaluate.artifact import DecodeScores

if TYPE_CHECKING:  # for annotations only: scoring needs no model
    from stages.shared.inference.translator import Translation


def score_hypotheses(translations: list[list[Translation]], references: list[str], seconds: float) -> DecodeScores:
    """sacreBLEU BLEU (cased and lowercased) and chrF of the best hypotheses, the mean
    model score, and speed (``DecodeScores``)."""
    hypotheses = [line[0].text for line in translations]
    bleu, bleu_lc, chrf = BLEU(), BLEU(lowercase=True), CHRF()
    tokens = sum(len(line[0].hypothesis.tokens) + 1 for line in translations)
    return DecodeScores(
        bleu=bleu.corpus_score(hypotheses, [references]).score,
        bleu_lc=bleu_lc.corpus_score(hypotheses, [references]).score,
        bleu_lc_signature=str(bleu_lc.get_signature()),
        chrf=chrf.corpus_score(hypotheses, [references]).score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        mean_score=sum(line[0].hypothesis.score for line in translations) / len(translations),
        decode_seconds=seconds,
        sentences_per_second=len(translations) / max(seconds, 1e-9),
        tokens_per_second=tokens / max(seconds, 1e-9),
    )
