"""Scoring decoded translations with sacreBLEU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sacrebleu.metrics import BLEU, CHRF

if TYPE_CHECKING:  # for annotations only: scoring needs no model
    from stages.shared.inference.translator import Translation


def score_hypotheses(translations: list[list[Translation]], references: list[str], prefix: str,
                     seconds: float) -> dict:
    """sacreBLEU BLEU and chrF of the best hypotheses, the mean model score, and speed.

    ``bleu`` is the headline: cased, on detokenized text, 13a-tokenized inside sacreBLEU.
    ``bleu_lc`` is the same lowercased (``sacrebleu -lc``), the kind most Multi30k papers
    report (lowercased, tokenized BLEU; e.g. Wu et al. 2021), so ours can be held
    against theirs. Its signature says ``case:lc``."""
    hypotheses = [line[0].text for line in translations]
    bleu, bleu_lc, chrf = BLEU(), BLEU(lowercase=True), CHRF()
    tokens = sum(len(line[0].hypothesis.tokens) + 1 for line in translations)
    return {
        f"{prefix}bleu": bleu.corpus_score(hypotheses, [references]).score,
        f"{prefix}bleu_lc": bleu_lc.corpus_score(hypotheses, [references]).score,
        f"{prefix}bleu_lc_signature": str(bleu_lc.get_signature()),
        f"{prefix}chrf": chrf.corpus_score(hypotheses, [references]).score,
        f"{prefix}bleu_signature": str(bleu.get_signature()),
        f"{prefix}chrf_signature": str(chrf.get_signature()),
        f"{prefix}mean_score": sum(line[0].hypothesis.score for line in translations) / len(translations),
        f"{prefix}decode_seconds": seconds,
        f"{prefix}sentences_per_second": len(translations) / max(seconds, 1e-9),
        f"{prefix}tokens_per_second": tokens / max(seconds, 1e-9),
    }
