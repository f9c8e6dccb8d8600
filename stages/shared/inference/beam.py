"""Batched beam search over the models' incremental interface (stages/shared/models).

The search of Vaswani et al. (2017), section 6.1: beam size k, GNMT's length penalty
(Wu et al. 2016, section 7) with alpha = 0.6, at most ``a * |x| + b`` output tokens
(a = 1, b = 50), stopping early when possible. A hypothesis Y is ranked by

    score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

where |Y| counts the generated tokens, EOS included, and |x| the source tokens, its EOS
included.

The bookkeeping follows fairseq's SequenceGenerator. At each step every sentence's k
live beams propose their 2k best continuations (by cumulative log-probability). EOS
candidates among the first k become finished hypotheses; the k best others stay live
(at most k of the 2k candidates end in EOS, one per beam, so there are always k). A
sentence is done once k hypotheses have finished (the early stop) or when it reaches
its maximum length, where EOS is the only continuation left; before ``min_length``
tokens EOS is not a continuation at all. Done sentences leave the
batch, so the rest decode without them. Beam size 1 is greedy decoding.

The search is in three parts, each tested on its own: the per-step adjustments of the
model's log-probabilities (``constrain_step``: banned tokens, the minimum length, EOS at
the length limit), the choice of candidates (``best_candidates``, ``finish`` and
``continuing``), and following the surviving beams (``follow``: the model's state and
the tokens so far). ``beam_search`` runs them step by step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from stages.shared.inference.search import DEFAULT_SEARCH
from stages.shared.models.protocol import TranslationModel


@dataclass(frozen=True)
class Hypothesis:
    tokens: tuple[int, ...]  # generated tokens, without BOS and EOS
    log_prob: float  # log P(Y | X), EOS included
    score: float  # log_prob / length_normalizer(len(tokens) + 1, length_penalty)


def length_normalizer(length: int, length_penalty: float) -> float:
    """GNMT's lp(Y) for |Y| = ``length`` tokens (EOS included), ``length_penalty`` its
    alpha (the name the search settings, fairseq's ``--lenpen`` and CTranslate2 use); 1.0
    when it is 0."""
    return ((5.0 + length) / 6.0) ** length_penalty


def max_output_lengths(src: Tensor, pad_id: int, a: float, b: int, positions: int | None = None) -> Tensor:
    """(B,) most tokens (EOS included) each sentence may generate: a * |x| + b, and no
    more than ``search.output_room`` leaves a model with ``positions`` positions
    (``model_positions``; None: unbounded), computed here for the whole batch at once."""
    lengths = (src != pad_id).sum(dim=1)
    limits = (lengths.double() * a).floor().long() + b
    if positions is not None:
        limits = torch.minimum(limits, (positions - lengths - 2).clamp(min=1))
    return limits


def model_positions(model: TranslationModel) -> int | None:
    """The positions a model's position table has (None when it has none: the RNN)."""
    return getattr(getattr(model, "config", None), "max_positions", None)


def row_top_k(values: Tensor, k: int, groups: int = 16) -> tuple[Tensor, Tensor]:
    """``values.topk(k, dim=1)`` for (rows, V) rows of a vocabulary, 2-3x faster on a CPU.

    torch's CPU top-k pays a few nanoseconds for each entry it reads into its per-row
    queue; a column maximum is a vectorized pass. So the first ``groups * (V // groups)``
    entries of a row are read as a (groups, V // groups) table, and the row's k best
    entries are sought only in the k columns with the highest maxima: an entry outside
    them is beaten by those k maxima, so it is not among the k best. That leaves a
    top-k over ``groups * k`` entries (plus the V % groups left over at the end).
    Ties may come out in another order than torch's. On a GPU, where torch's top-k is
    one fast kernel and each extra operator is a launch, it is torch's.
    """
    rows, vocab = values.shape
    width = vocab // groups
    if values.device.type != "cpu" or width < 4 * k:  # or a small vocabulary: nothing to gain
        return values.topk(k, dim=1)
    table = values[:, :groups * width].view(rows, groups, width)  # token g * width + c at [g, c]
    _, columns = table.amax(dim=1).topk(k, dim=1)  # (rows, k)
    candidates = table.gather(2, columns.unsqueeze(1).expand(rows, groups, k)).view(rows, groups * k)
    left_over = values[:, groups * width:]
    if left_over.size(1):
        candidates = torch.cat([candidates, left_over], dim=1)
    top, at = candidates.topk(k, dim=1)
    in_table = at < groups * k
    at_table = at.clamp(max=groups * k - 1)
    token_in_table = (at_table // k) * width + columns.gather(1, at_table % k)
    return top, torch.where(in_table, token_in_table, at - groups * k + groups * width)


def constrain_step(log_probs: Tensor, step: int, banned: Tensor, eos_id: int, min_length: int,
                   rows_at_limit: Tensor | None) -> None:
    """The per-step score adjustments, in place on (rows, V) log-probabilities: ``banned``
    tokens are never generated, EOS not before ``min_length`` tokens, and a row at its
    length limit (``rows_at_limit``) may only end, with the log-probability the model
    gave EOS. (The length penalty applies to finished hypotheses: ``finish``.)"""
    eos_at_limit = log_probs[rows_at_limit, eos_id] if rows_at_limit is not None else None
    log_probs.index_fill_(1, banned, float("-inf"))
    if step < min_length:
        log_probs[:, eos_id] = float("-inf")
    if rows_at_limit is not None:
        log_probs[rows_at_limit] = float("-inf")
        log_probs[rows_at_limit, eos_id] = eos_at_limit


@dataclass(frozen=True)
class Candidates:
    """Each live sentence's 2k best continuations, best first (live, 2k each)."""

    scores: Tensor  # cumulative log-probabilities
    beams: Tensor  # the beam each continues
    tokens: Tensor  # the token each adds


def best_candidates(scores: Tensor, log_probs: Tensor, k: int) -> Candidates:
    """The 2k best continuations of each sentence's beams (``scores``: (live, beams)
    cumulative log-probabilities; ``log_probs``: (live * beams, V) of the next token)."""
    live, beams, vocab = scores.size(0), scores.size(1), log_probs.size(1)
    # A sentence's 2k best continuations are among its beams' own 2k best each: take
    # those first (B * beams rows of the vocabulary), then the 2k best of their
    # beams * 2k. That reads the (B * beams, V) log-probabilities once, where adding
    # the beams' scores to every entry before one top-k wrote and read them again.
    per_beam = min(2 * k, vocab)
    beam_scores, beam_tokens = row_top_k(log_probs, per_beam)
    totals = (scores.view(-1, 1) + beam_scores).view(live, beams * per_beam)
    top_scores, top_ids = totals.topk(min(2 * k, beams * per_beam), dim=1)
    return Candidates(top_scores, top_ids // per_beam, beam_tokens.view(live, -1).gather(1, top_ids))


def finish(candidates: Candidates, k: int, eos_id: int, step: int, length_penalty: float, tokens: Tensor,
           sentence_ids: list[int], finished: list[list[Hypothesis]]) -> None:
    """Adds to ``finished`` (per original sentence) the hypotheses that end here: EOS
    among a sentence's first k candidates, while it has fewer than k finished. A
    hypothesis' score is its log-probability over the length normalizer of its
    ``step + 1`` tokens. ``tokens``: (live * beams, step + 1) the beams' tokens so far."""
    beams = tokens.size(0) // len(sentence_ids)
    rank = torch.arange(candidates.tokens.size(1), device=candidates.tokens.device)
    ending = (candidates.tokens == eos_id) & (rank < k) & torch.isfinite(candidates.scores)
    # The bookkeeping is kept on the host: on a GPU each value read back from the device
    # makes the host wait, so a step reads back one small tensor, plus the finished
    # hypotheses' tokens on steps where some finish.
    read = torch.stack([ending.float(), candidates.scores, candidates.beams.float()]).cpu()
    ending_at = read[0].nonzero().tolist()
    if not ending_at:
        return
    _, scores, from_beams = read.tolist()
    rows = torch.tensor([row * beams + int(from_beams[row][at]) for row, at in ending_at])
    prefixes = tokens[rows.to(tokens.device), 1:].tolist()
    for (row, at), prefix in zip(ending_at, prefixes):
        sentence = finished[sentence_ids[row]]
        if len(sentence) < k:
            score = scores[row][at] / length_normalizer(step + 1, length_penalty)
            sentence.append(Hypothesis(tuple(prefix), scores[row][at], score))


def continuing(candidates: Candidates, k: int, eos_id: int, beams: int) -> Candidates:
    """The k best candidates that do not end in EOS, in score order. At most one a beam
    ends in EOS, so there are k of them, but for a vocabulary smaller than the beam at
    the first step: then fewer beams go on, and the next step spreads to k."""
    count = candidates.tokens.size(1)
    rank = torch.arange(count, device=candidates.tokens.device)
    order = ((candidates.tokens == eos_id).long() * count + rank).argsort(dim=1)[:, :min(k, count - beams)]
    return Candidates(candidates.scores.gather(1, order), candidates.beams.gather(1, order),
                      candidates.tokens.gather(1, order))


def follow(model: TranslationModel, state, tokens: Tensor, going_on: Candidates, keep: Tensor, beams: int):
    """The state and tokens of the beams that go on: of the sentences ``keep``, the beams
    ``going_on`` continues, each with its new token. (state, tokens)."""
    rows = ((keep * beams).unsqueeze(1) + going_on.beams[keep]).view(-1)
    state = model.reorder_state(state, rows, keep)
    return state, torch.cat([tokens[rows], going_on.tokens[keep].view(-1, 1)], dim=1)


@torch.no_grad()
def beam_search(model: TranslationModel, src: Tensor, beam_size: int, *, bos_id: int, eos_id: int, pad_id: int,
                length_penalty: float = DEFAULT_SEARCH.length_penalty,
                max_length_a: float = DEFAULT_SEARCH.max_length_a, max_length_b: int = DEFAULT_SEARCH.max_length_b,
                min_length: int = DEFAULT_SEARCH.min_length, nbest: int = 1,
                banned_ids: tuple[int, ...] | None = None) -> list[list[Hypothesis]]:
    """The ``nbest`` best hypotheses of each sentence of ``src`` (B, S), best first.

    EOS may end a hypothesis only after ``min_length`` tokens (fairseq's default of 1:
    a weak model's likeliest output is often the empty one). ``banned_ids`` are never
    generated (default: padding and BOS).
    """
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and the beam size ({beam_size}), got {nbest}")
    batch, k = src.size(0), beam_size
    device = src.device
    banned = torch.tensor((pad_id, bos_id) if banned_ids is None else banned_ids, dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    # One row a sentence at the first step, where every beam would hold the same BOS; k
    # rows a sentence, one per beam, once the first step's candidates have spread them (a
    # family may keep what a sentence's beams share once a sentence).
    state = model.start_decoding(src)
    # Per-sentence values the loop reads one by one are Python lists: reading a tensor
    # element costs microseconds of op dispatch, and that per-step overhead runs on one
    # thread whatever the thread count.
    sentence_ids = list(range(batch))  # original index of each live sentence
    limits = max_output_lengths(src, pad_id, max_length_a, max_length_b, model_positions(model)).cpu()
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.zeros((batch, 1), device=device)  # (sentences, live beams each)

    for step in range(int(limits.max())):
        log_probs, state = model.decode_step(state, tokens[:, -1])
        log_probs = log_probs.float()
        beams = scores.size(1)
        at_limit = step + 1 >= limits
        rows_at_limit = None
        if bool(at_limit.any()):  # the last allowed token: EOS
            rows_at_limit = at_limit.nonzero().squeeze(1).to(device)
            rows_at_limit = (rows_at_limit.unsqueeze(1) * beams + torch.arange(beams, device=device)).view(-1)
        constrain_step(log_probs, step, banned, eos_id, min_length, rows_at_limit)

        candidates = best_candidates(scores, log_probs, k)
        finish(candidates, k, eos_id, step, length_penalty, tokens, sentence_ids, finished)
        done = torch.tensor([len(finished[i]) == k for i in sentence_ids]) | at_limit
        if bool(done.all()):
            break

        going_on = continuing(candidates, k, eos_id, beams)
        keep_host = (~done).nonzero().squeeze(1)
        state, tokens = follow(model, state, tokens, going_on, keep_host.to(device), beams)
        scores, limits = going_on.scores[keep_host.to(device)], limits[keep_host]
        sentence_ids = [sentence_ids[i] for i in keep_host.tolist()]

    return [sorted(hypotheses, key=lambda h: -h.score)[:nbest] for hypotheses in finished]
