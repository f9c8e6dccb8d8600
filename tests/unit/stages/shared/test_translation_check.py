"""Source use and collapse (stages/shared/translation_check.py) on fixed tiny models
whose use of the source is known: one reads the target's left context only, one copies
its source."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from stages.shared.translation_check import derangement, sentence_nll, source_use, target_cross_entropy
from stages.shared.output_collapse import collapse

SPECIAL = {"pad": 0, "bos": 1, "eos": 2}
VOCAB = 12


class SourceBlind(nn.Module):
    """Logits from the previous target token alone: a bigram model that never reads src."""

    family = "transformer"  # its loss is the plain cross-entropy of these logits

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(VOCAB, VOCAB)
        torch.manual_seed(0)
        nn.init.normal_(self.table.weight)

    def forward(self, src, tgt_in):
        return self.table(tgt_in)


class Copier(nn.Module):
    """Predicts the source token at the same position, with high confidence: what a model
    that reads its source does on pairs whose target is the source."""

    family = "transformer"

    def forward(self, src, tgt_in):
        length = tgt_in.size(1)
        wanted = torch.full_like(tgt_in, SPECIAL["eos"])
        shared = min(length, src.size(1))
        wanted[:, :shared] = src[:, :shared]
        wanted = wanted.masked_fill(wanted == SPECIAL["pad"], SPECIAL["eos"])
        return torch.nn.functional.one_hot(wanted, VOCAB).float() * 8.0


def pairs(count: int = 40, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Random sentences of ids 3..11 ending with EOS, each its own target."""
    generator = random.Random(seed)
    sentences = [[generator.randrange(3, VOCAB) for _ in range(generator.randrange(2, 9))] + [2]
                 for _ in range(count)]
    return sentences, [list(sentence) for sentence in sentences]


def test_a_derangement_leaves_no_sentence_its_own_source_and_is_fixed():
    for count in (2, 3, 17, 1000):
        other = derangement(count)
        assert sorted(other) == list(range(count)) and all(index != own for own, index in enumerate(other))
    assert derangement(50) == derangement(50)
    with pytest.raises(ValueError, match="two or more"):
        derangement(1)


def test_a_model_that_ignores_its_source_uses_none_of_it_and_a_copier_uses_a_lot():
    sources, targets = pairs()
    blind = source_use(SourceBlind(), sources, targets, SPECIAL)
    assert blind["source_use"] == pytest.approx(0.0, abs=1e-6)
    assert blind["valid_nll"] == pytest.approx(blind["valid_nll_other_source"], abs=1e-6)
    copier = source_use(Copier(), sources, targets, SPECIAL)
    # Own source: nearly every token right (8 nats of margin over 11 others); another
    # sentence's: mostly wrong, at about 8 nats each.
    assert copier["valid_nll"] < 0.01
    assert copier["source_use"] > 4.0
    assert copier["source_use_sentences"] == len(sources)


def test_source_use_s_standard_error_is_the_spread_a_bootstrap_of_the_sentences_gives():
    """The delta method's standard error of the ratio sum(d_i) / sum(n_i) against the
    standard deviation of the same ratio over sentences drawn again with replacement."""
    sources, targets = pairs(count=300, seed=4)
    measured = source_use(Copier(), sources, targets, SPECIAL)
    true, tokens = sentence_nll(Copier(), sources, targets, SPECIAL)
    other = derangement(len(sources))
    swapped, _ = sentence_nll(Copier(), [sources[index] for index in other], targets, SPECIAL)
    draws = np.random.default_rng(0).integers(0, len(sources), size=(2000, len(sources)))
    resampled = (swapped - true)[draws].sum(axis=1) / tokens[draws].sum(axis=1)
    assert measured["source_use"] == pytest.approx((swapped - true).sum() / tokens.sum())
    assert measured["source_use_error"] == pytest.approx(resampled.std(ddof=1), rel=0.1)
    assert source_use(SourceBlind(), sources, targets, SPECIAL)["source_use_error"] == pytest.approx(0.0, abs=1e-6)


def test_the_cross_entropy_counts_eos_and_no_padding():
    # A uniform model: log(V) nats per token whatever the lengths and padding.
    class Uniform(nn.Module):
        family = "transformer"

        def forward(self, src, tgt_in):
            return torch.zeros(*tgt_in.shape, VOCAB)

    sources, targets = pairs(count=70)  # two batches of unequal lengths
    assert target_cross_entropy(Uniform(), sources, targets, SPECIAL) == pytest.approx(torch.log(
        torch.tensor(float(VOCAB))).item(), rel=1e-6)


def test_collapse_counts_the_most_frequent_line_and_the_distinct_ones():
    found = collapse(["a ."] * 6 + ["b ."] * 3 + ["c ."])
    assert found == {"top_output_share": 0.6, "top_output": "a .", "distinct_output_share": 0.3}
    assert collapse([str(index) for index in range(20)])["top_output_share"] == 0.05
    with pytest.raises(ValueError):
        collapse([])
