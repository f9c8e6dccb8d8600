"""Beam search against exhaustive search, greedy decoding and itself one sentence at a time."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from stages.shared.inference.beam import (
    beam_search,
    length_normalizer,
    max_output_lengths,
    row_top_k,
)
from stages.shared.models.build import build_model
from stages.shared.models.families import NAMES as FAMILIES

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}


class PrefixModel(nn.Module):
    """A model under the decoding interface whose next-token distribution is a fixed
    random function of (source, prefix): small enough to enumerate every output."""

    def __init__(self, vocab: int = 6, eos_bias: float = 0.0, temperature: float = 1.5):
        super().__init__()
        self.vocab, self.eos_bias, self.temperature = vocab, eos_bias, temperature
        self.steps = 0
        self.rows: list[int] = []  # rows decoded at each step

    def start_decoding(self, src: torch.Tensor) -> torch.Tensor:
        return src[:, :1].clone()  # the state: the source's first token, then the tokens so far

    def decode_step(self, state: torch.Tensor, tokens: torch.Tensor):
        self.steps += 1
        self.rows.append(tokens.size(0))
        state = torch.cat([state, tokens.unsqueeze(1)], dim=1)
        return torch.stack([self.log_probs(tuple(row)) for row in state.tolist()]), state

    def reorder_state(self, state: torch.Tensor, order: torch.Tensor, sentences=None) -> torch.Tensor:
        return state.index_select(0, order)

    def log_probs(self, history: tuple[int, ...]) -> torch.Tensor:
        generator = torch.Generator().manual_seed(hash(history) % (2**31))
        logits = torch.randn(self.vocab, generator=generator) * self.temperature
        logits[EOS] += self.eos_bias
        return torch.log_softmax(logits, dim=0)


def exhaustive(model: PrefixModel, source_token: int, max_length: int, length_penalty: float, min_length: int = 0):
    """Every output with at least ``min_length`` tokens before EOS and at most
    ``max_length`` with it, best first."""
    allowed = [t for t in range(model.vocab) if t not in (PAD, BOS, EOS)]
    outputs = []
    for length in range(min_length, max_length):
        for prefix in itertools.product(allowed, repeat=length):
            history = (source_token, BOS)
            log_prob = 0.0
            for token in (*prefix, EOS):
                log_prob += float(model.log_probs(history)[token])
                history += (token,)
            outputs.append((prefix, log_prob, log_prob / length_normalizer(length + 1, length_penalty)))
    return sorted(outputs, key=lambda output: -output[2])


def test_length_penalty_is_gnmts_formula():
    # lp(Y) = ((5 + |Y|) / 6) ** alpha, by hand: |Y| = 7, alpha = 0.6 gives 2 ** 0.6.
    assert length_normalizer(7, 0.6) == pytest.approx(1.5157165665103982)
    assert length_normalizer(1, 0.6) == pytest.approx(1.0)
    assert length_normalizer(12, 0.0) == 1.0
    src = torch.tensor([[5, 6, 7, EOS, PAD], [5, EOS, PAD, PAD, PAD]])
    assert max_output_lengths(src, PAD, 1.0, 50).tolist() == [54, 52]


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0])
def test_a_beam_wide_enough_finds_every_output_in_exhaustive_order(length_penalty):
    model = PrefixModel()
    # Outputs of up to 3 tokens from 4 choices (unk, 4, 5 and EOS): 1 + 3 + 9 = 13; a
    # beam of 13 never prunes, so its n-best list is the exhaustive ranking.
    src = torch.tensor([[7, EOS], [9, EOS]])
    results = beam_search(model, src, 13, length_penalty=length_penalty, max_length_a=0.0, max_length_b=3,
                          min_length=0, nbest=13, **SPECIAL)
    for row, source_token in enumerate((7, 9)):
        expected = exhaustive(model, source_token, 3, length_penalty)
        assert [h.tokens for h in results[row]] == [prefix for prefix, _, _ in expected]
        assert [h.log_prob for h in results[row]] == pytest.approx([lp for _, lp, _ in expected], abs=1e-5)
        assert [h.score for h in results[row]] == pytest.approx([s for _, _, s in expected], abs=1e-5)


def test_a_narrow_beam_finds_the_best_output_of_a_peaked_model():
    model = PrefixModel(temperature=4.0)
    src = torch.tensor([[11, EOS]])
    best = beam_search(model, src, 4, length_penalty=0.6, max_length_a=0.0, max_length_b=4, **SPECIAL)[0][0]
    expected = exhaustive(model, 11, 4, 0.6, min_length=1)[0]
    assert best.tokens == expected[0] and best.score == pytest.approx(expected[2], abs=1e-5)


def test_a_sentence_stops_once_beam_size_hypotheses_have_finished():
    # EOS is by far the likeliest token: one beam finishes at the first step, a second
    # at the next, and with beam 2 the search stops there, far from its length limit.
    model = PrefixModel(eos_bias=8.0)
    results = beam_search(model, torch.tensor([[5, EOS]]), 2, length_penalty=0.6, max_length_a=0.0, max_length_b=20,
                          min_length=0, nbest=2, **SPECIAL)
    assert model.steps == 2
    assert sorted(len(h.tokens) + 1 for h in results[0]) == [1, 2]
    assert all(math.isfinite(h.score) for h in results[0])  # real hypotheses, not dead beams


def test_the_first_step_decodes_one_row_a_sentence_and_the_next_one_a_beam():
    # Every beam starts from the same BOS: decoding it k times would be the same work k times.
    model = PrefixModel(vocab=12)
    beam_search(model, torch.tensor([[5, 6, EOS], [7, EOS, PAD]]), 3, length_penalty=0.6, max_length_a=0.0,
                max_length_b=4, **SPECIAL)
    assert model.rows[:2] == [2, 2 * 3]


def test_the_length_limit_ends_every_hypothesis_with_eos():
    model = PrefixModel(eos_bias=-50.0)  # EOS practically never chosen freely
    results = beam_search(model, torch.tensor([[5, 6, 7, EOS]]), 3, length_penalty=0.6, max_length_a=1.0,
                          max_length_b=2, nbest=3, **SPECIAL)
    assert [len(h.tokens) + 1 for h in results[0]] == [6, 6, 6]  # |x| = 4 (EOS included) + 2
    assert all(EOS not in h.tokens and PAD not in h.tokens and BOS not in h.tokens for h in results[0])


@torch.no_grad()
def greedy(model: nn.Module, src: torch.Tensor, max_length: torch.Tensor) -> list[tuple[tuple[int, ...], float]]:
    """Plain greedy decoding, one argmax per step, EOS not first: the reference for beam 1."""
    state = model.start_decoding(src)
    tokens = torch.full((src.size(0),), BOS)
    outputs: list[list[int]] = [[] for _ in range(src.size(0))]
    log_probs_sum = [0.0] * src.size(0)
    finished = [False] * src.size(0)
    for step in range(int(max_length.max())):
        log_probs, state = model.decode_step(state, tokens)
        log_probs[:, [PAD, BOS]] = float("-inf")
        if step == 0:  # min_length 1: no empty output
            log_probs[:, EOS] = float("-inf")
        for row in range(src.size(0)):
            if step + 1 >= max_length[row]:
                log_probs[row, :EOS] = log_probs[row, EOS + 1:] = float("-inf")
        tokens = log_probs.argmax(dim=1)
        for row in range(src.size(0)):
            if not finished[row]:
                log_probs_sum[row] += float(log_probs[row, tokens[row]])
                finished[row] = int(tokens[row]) == EOS
                if not finished[row]:
                    outputs[row].append(int(tokens[row]))
        if all(finished):
            break
    return [(tuple(output), total) for output, total in zip(outputs, log_probs_sum)]


def random_model(family: str) -> nn.Module:
    torch.manual_seed(0)
    untied = {"share_embeddings": False} if family == "transformer" else {}
    model = build_model(family, "tiny", {"dropout": 0.0, **untied}, 40, 40, (4, 5))
    # A larger EOS row: some hypotheses end early, others at the length limit, so
    # sentences leave the batch at different steps.
    with torch.no_grad():
        model.output.weight[EOS] *= 8.0
    return model.eval()


def sources() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    lengths = [7, 3, 5, 9, 2, 6]
    src = torch.full((len(lengths), max(lengths)), PAD)
    for row, length in enumerate(lengths):
        src[row, :length - 1] = torch.randint(6, 40, (length - 1,), generator=generator)
        src[row, length - 1] = EOS
    return src


@pytest.mark.parametrize("family", FAMILIES)
def test_beam_size_one_is_greedy_decoding(family):
    model, src = random_model(family), sources()
    found = beam_search(model, src, 1, length_penalty=0.6, max_length_a=1.0, max_length_b=4, **SPECIAL)
    expected = greedy(model, src, max_output_lengths(src, PAD, 1.0, 4))
    assert [h[0].tokens for h in found] == [tokens for tokens, _ in expected]
    assert [h[0].log_prob for h in found] == pytest.approx([total for _, total in expected], abs=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_beam_search_equals_decoding_each_sentence_alone(family):
    model, src = random_model(family), sources()
    batched = beam_search(model, src, 4, length_penalty=0.6, max_length_a=1.0, max_length_b=4, nbest=3, **SPECIAL)
    for row in range(src.size(0)):
        length = int((src[row] != PAD).sum())
        alone = beam_search(model, src[row:row + 1, :length], 4, length_penalty=0.6, max_length_a=1.0, max_length_b=4,
                            nbest=3, **SPECIAL)[0]
        assert [h.tokens for h in batched[row]] == [h.tokens for h in alone]
        assert [h.score for h in batched[row]] == pytest.approx([h.score for h in alone], abs=1e-4)


def test_nbest_cannot_exceed_the_beam():
    with pytest.raises(ValueError, match="nbest"):
        beam_search(PrefixModel(), torch.tensor([[5, EOS]]), 2, nbest=3, **SPECIAL)


@pytest.mark.parametrize("vocab", [10_000, 10_007, 517, 40])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_row_top_k_equals_torch_topk(vocab, k):
    """The grouped top-k against torch's, on random rows and on rows built to catch a
    shortcut: the best entries all in one column of the table, all in the entries left
    over after the last full column, or rows of -inf but one (a sentence at its length
    limit, where EOS is the only continuation)."""
    generator = torch.Generator().manual_seed(vocab * 10 + k)
    values = torch.randn(12, vocab, generator=generator)
    width = vocab // 16
    if width:
        values[0, torch.arange(16) * width + 3] = 10.0 + torch.arange(16.0)  # one column
    values[1, vocab - vocab % 16:] = 20.0 + torch.arange(float(vocab % 16))  # the left-over entries
    values[2] = float("-inf")
    values[2, EOS] = -0.5
    top, ids = row_top_k(values, k)
    expected_top, expected_ids = values.topk(k, dim=1)
    assert torch.equal(top, expected_top)
    finite = torch.isfinite(expected_top)  # -inf ties may come out in another order
    assert torch.equal(ids[finite], expected_ids[finite])
    assert torch.equal(values.gather(1, ids), top)
