"""The beam search's parts, each on its own: the per-step adjustments, the choice of
candidates, finishing, continuing and following the beams (stages/shared/inference/beam.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from stages.shared.inference.beam import (
    Candidates,
    Hypothesis,
    best_candidates,
    constrain_step,
    continuing,
    finish,
    follow,
    length_normalizer,
)

EOS = 3


def log_probs(rows: int, vocab: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.log_softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)), dim=1)


def test_banned_tokens_are_never_and_eos_not_before_the_minimum_length():
    values = log_probs(4)
    constrain_step(values, step=2, banned=torch.tensor([0, 2]), eos_id=EOS, min_length=3, rows_at_limit=None)
    assert torch.isinf(values[:, [0, 2, EOS]]).all() and torch.isfinite(values[:, 4:]).all()
    values = log_probs(4)
    constrain_step(values, step=3, banned=torch.tensor([0, 2]), eos_id=EOS, min_length=3, rows_at_limit=None)
    assert torch.isfinite(values[:, EOS]).all()


def test_a_row_at_its_limit_may_only_end_with_the_probability_the_model_gave_eos():
    original = log_probs(4)
    values = original.clone()
    # at its limit before the minimum length: it still ends there, as the limit allows nothing else
    constrain_step(values, step=0, banned=torch.tensor([0]), eos_id=EOS, min_length=5, rows_at_limit=torch.tensor([1, 3]))
    for row in (1, 3):
        assert values[row, EOS] == original[row, EOS]
        assert torch.isinf(values[row, torch.arange(12) != EOS]).all()
    assert torch.isinf(values[[0, 2], EOS]).all()  # the others: not before min_length


def test_the_best_candidates_are_the_best_beam_token_pairs_by_cumulative_score():
    k, beams, vocab = 3, 3, 12
    scores = torch.tensor([[-0.1, -0.7, -2.0], [-0.3, -0.4, -0.5]])
    values = log_probs(2 * beams, vocab)
    chosen = best_candidates(scores, values, k)
    for sentence in range(2):
        every = sorted(((float(scores[sentence, b] + values[sentence * beams + b, t]), b, t)
                        for b, t in itertools.product(range(beams), range(vocab))), reverse=True)[:2 * k]
        assert chosen.beams[sentence].tolist() == [b for _, b, _ in every]
        assert chosen.tokens[sentence].tolist() == [t for _, _, t in every]
        assert chosen.scores[sentence].tolist() == pytest.approx([s for s, _, _ in every], abs=1e-6)


def candidates(tokens: list[list[int]], scores: list[list[float]] | None = None) -> Candidates:
    tokens = torch.tensor(tokens)
    scores = torch.tensor(scores) if scores else -torch.arange(tokens.size(1), dtype=torch.float).expand_as(tokens)
    return Candidates(scores.clone(), torch.arange(tokens.size(1)).remainder(2).expand_as(tokens).clone(), tokens)


def test_only_eos_among_the_first_k_finishes_with_the_length_penalty_and_at_most_k_a_sentence():
    found = candidates([[EOS, 5, EOS, 6, EOS, 7], [5, 6, 7, 8, EOS, EOS]])
    finished: list[list[Hypothesis]] = [[], [Hypothesis((9,), -1.0, -1.0)] * 2]
    tokens = torch.tensor([[2, 10], [2, 11], [2, 12], [2, 13]])  # two beams each, BOS and one token
    finish(found, 3, EOS, step=1, length_penalty=0.6, tokens=tokens, sentence_ids=[0, 1], finished=finished)
    # sentence 0: EOS at ranks 0 and 2 (rank 4 is past k); candidates alternate beams 0, 1
    assert [(h.tokens, h.log_prob) for h in finished[0]] == [((10,), -0.0), ((10,), -2.0)]
    assert finished[0][1].score == pytest.approx(-2.0 / length_normalizer(2, 0.6))
    assert len(finished[1]) == 2  # no EOS among its first 3


def test_a_non_finite_eos_does_not_finish():
    found = candidates([[EOS, 5]], [[-math.inf, -1.0]])
    finished: list[list[Hypothesis]] = [[]]
    finish(found, 1, EOS, 0, 0.6, torch.tensor([[2]]), [0], finished)
    assert finished == [[]]


def test_the_k_best_that_do_not_end_go_on_in_score_order():
    found = candidates([[EOS, 5, 6, EOS, 7, 8]])
    going_on = continuing(found, 3, EOS, beams=2)
    assert going_on.tokens.tolist() == [[5, 6, 7]]
    assert going_on.scores.tolist() == [[-1.0, -2.0, -4.0]]


class RowState:
    """A model whose state is its rows' ids: what ``follow`` hands it is visible."""

    def reorder_state(self, state, order, sentences=None):
        self.sentences = sentences
        return state[order]


def test_following_keeps_the_kept_sentences_beams_with_their_new_tokens():
    model = RowState()
    state = torch.arange(6)  # 3 sentences x 2 beams
    tokens = torch.tensor([[2, 10 + row] for row in range(6)])
    going_on = Candidates(torch.zeros(3, 2), torch.tensor([[1, 0], [1, 1], [0, 1]]),
                          torch.tensor([[20, 21], [22, 23], [24, 25]]))
    state, tokens = follow(model, state, tokens, going_on, keep=torch.tensor([0, 2]), beams=2)
    assert state.tolist() == [1, 0, 4, 5]
    assert model.sentences.tolist() == [0, 2]
    assert tokens.tolist() == [[2, 11, 20], [2, 10, 21], [2, 14, 24], [2, 15, 25]]
