"""The evaluate stage's scores: the cased headline and the lowercased BLEU beside it."""

from __future__ import annotations

import pytest

from stages.evaluate.scores import score_hypotheses
from stages.shared.inference.beam import Hypothesis
from stages.shared.inference.translator import Translation

REFERENCES = ["Ein Mann fährt Fahrrad auf der Wiese.", "Zwei Hunde spielen im Schnee."]  # no ß: its upper case is SS


def translations(lines: list[str]) -> list[list[Translation]]:
    return [[Translation(line, Hypothesis((5, 6), -1.0, -0.5))] for line in lines]


def test_lowercased_bleu_ignores_case_and_the_headline_does_not():
    shouted = translations([line.upper() for line in REFERENCES])
    scores = score_hypotheses(shouted, REFERENCES, seconds=1.0)
    assert scores.bleu_lc == pytest.approx(100.0)
    assert scores.bleu < 10.0
    assert "case:lc" in scores.bleu_lc_signature and "case:mixed" in scores.bleu_signature
    assert "tok:13a" in scores.bleu_lc_signature


def test_both_agree_when_case_is_right():
    scores = score_hypotheses(translations(REFERENCES), REFERENCES, seconds=1.0)
    assert scores.bleu == pytest.approx(100.0) and scores.bleu_lc == pytest.approx(100.0)
