"""The source-blind n-gram baselines (stages/report/ngram_baselines.py): interpolated
Kneser-Ney against values computed by hand, and proper distributions everywhere."""

from __future__ import annotations

import math
import random

import pytest

from stages.report.ngram_baselines import KneserNey, baselines

# Ids: 0 pad, 1 BOS, 2 EOS, 3 "a", 4 "b"; two training sentences "a b" and "a a".
VOCAB, BOS = 5, 1
TRAIN = [[3, 4, 2], [3, 3, 2]]


def test_the_unigram_model_discounts_its_counts_towards_uniform():
    # Counts a:3 b:1 EOS:2 over 6 tokens; one count of 1 and one of 2: D = 1 / (1 + 2 * 1).
    model = KneserNey(1, VOCAB, BOS).fit(TRAIN)
    discount, spread = 1 / 3, (1 / 3) * 3 / 6 / VOCAB
    assert model.probability((), 3) == pytest.approx((3 - discount) / 6 + spread)
    assert model.probability((), 4) == pytest.approx((1 - discount) / 6 + spread)
    assert model.probability((), 0) == pytest.approx(spread)  # never seen: the uniform share only


def test_the_bigram_model_interpolates_with_continuation_counts():
    # Bigrams (BOS a):2 (a b) (b EOS) (a a) (a EOS): n1 = 4, n2 = 1, D2 = 4 / 6. Continuations:
    # a follows 2 distinct tokens, b 1, EOS 2 (total 5): n1 = 1, n2 = 2, D1 = 1 / 5.
    model = KneserNey(2, VOCAB, BOS).fit(TRAIN)
    d2, d1 = 4 / 6, 1 / 5
    lower = {3: (2 - d1) / 5 + d1 * 3 / 5 / VOCAB, 4: (1 - d1) / 5 + d1 * 3 / 5 / VOCAB,
             2: (2 - d1) / 5 + d1 * 3 / 5 / VOCAB}
    assert model.probability((BOS,), 3) == pytest.approx((2 - d2) / 2 + d2 * 1 / 2 * lower[3])
    assert model.probability((3,), 4) == pytest.approx((1 - d2) / 3 + d2 * 3 / 3 * lower[4])
    assert model.probability((4,), 2) == pytest.approx((1 - d2) / 1 + d2 * 1 / 1 * lower[2])
    # A context never seen (EOS is never followed): the lower order's estimate.
    assert model.probability((2,), 3) == pytest.approx(lower[3])
    expected = -(math.log(model.probability((BOS,), 3)) + math.log(model.probability((3,), 4))
                 + math.log(model.probability((4,), 2))) / 3
    assert model.cross_entropy([[3, 4, 2]]) == pytest.approx(expected)
    assert expected == pytest.approx(-(math.log(0.794667) + math.log(0.233778) + math.log(0.589333)) / 3, rel=1e-5)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_s_probabilities_sum_to_one(order):
    generator = random.Random(order)
    corpus = [[generator.randrange(3, 20) for _ in range(generator.randrange(1, 12))] + [2] for _ in range(200)]
    model = KneserNey(order, 20, BOS).fit(corpus)
    contexts = [tuple(corpus[0][:order - 1]), (BOS,) * (order - 1), (19, 18, 17)[:order - 1], (7,) * (order - 1)]
    for context in contexts:
        assert sum(model.probability(context, token) for token in range(20)) == pytest.approx(1.0, abs=1e-9)


def test_higher_orders_fit_a_repetitive_target_side_better():
    generator = random.Random(0)
    phrases = [[3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13, 14]]
    corpus = [sum((phrases[generator.randrange(3)] for _ in range(3)), []) + [2] for _ in range(300)]
    found = baselines(corpus[:250], corpus[250:], 20, BOS)["nats_per_token"]
    assert found["1"] > found["2"] > found["3"] >= found["4"] - 1e-3
    assert found["1"] < math.log(20)  # better than uniform


def test_an_order_below_one_is_refused():
    with pytest.raises(ValueError, match="order is 1 or more"):
        KneserNey(0, VOCAB, BOS)
