"""Token-budget batching: budget, coverage, determinism, worker split, resume."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from stages.train.batching import (
    BatchPosition,
    batches_from,
    token_batches,
    worker_batches,
)


@pytest.fixture
def lengths():
    # Translations: target lengths follow source lengths (about 1.1x here, with noise).
    rng = np.random.default_rng(0)
    src = rng.integers(1, 60, 5000)
    return src, np.clip(np.round(src * 1.1 + rng.normal(0, 2, 5000)), 1, None).astype(int)


def test_every_batch_fits_the_token_budget_on_both_sides(lengths):
    src, tgt = lengths
    for batch in token_batches(src, tgt, max_tokens=600, seed=1, epoch=0):
        assert len(batch) * src[batch].max() <= 600 and len(batch) * tgt[batch].max() <= 600


def test_an_epoch_covers_every_pair_exactly_once(lengths):
    src, tgt = lengths
    batches = token_batches(src, tgt, max_tokens=600, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))


def _padding_efficiency(batches, lengths):
    return sum(int(lengths[b].sum()) for b in batches) / sum(len(b) * int(lengths[b].max()) for b in batches)


def test_bucketing_keeps_padding_low(lengths):
    from stages.train.batching import _fill

    src, tgt = lengths
    bucketed = token_batches(src, tgt, max_tokens=600, seed=1, epoch=0)
    unbucketed = _fill(np.random.default_rng(1).permutation(len(src)), src, tgt, 600)
    assert _padding_efficiency(bucketed, tgt) > 0.9
    assert _padding_efficiency(unbucketed, tgt) < 0.7


def test_order_depends_only_on_seed_and_epoch(lengths):
    src, tgt = lengths
    first = token_batches(src, tgt, 600, seed=1, epoch=3)
    assert all(np.array_equal(a, b) for a, b in zip(first, token_batches(src, tgt, 600, seed=1, epoch=3)))
    assert not np.array_equal(first[0], token_batches(src, tgt, 600, seed=1, epoch=4)[0])
    assert not np.array_equal(first[0], token_batches(src, tgt, 600, seed=2, epoch=3)[0])


def test_workers_get_disjoint_equal_shares(lengths):
    src, tgt = lengths
    batches = token_batches(src, tgt, 600, seed=1, epoch=0)
    shares = [worker_batches(batches, rank, 3) for rank in range(3)]
    assert len({len(share) for share in shares}) == 1
    seen = np.concatenate([np.concatenate(share) for share in shares])
    assert len(seen) == len(set(seen.tolist()))


def test_resuming_mid_epoch_neither_repeats_nor_skips(lengths):
    src, tgt = lengths
    straight = list(islice(batches_from(BatchPosition(), src, tgt, 600, seed=5, rank=1, world_size=2), 300))
    saved_position = straight[119][0]  # "checkpoint" after 120 steps
    resumed = list(islice(batches_from(saved_position, src, tgt, 600, seed=5, rank=1, world_size=2), 180))
    assert [p for p, _ in resumed] == [p for p, _ in straight[120:]]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(resumed, straight[120:]))
    assert straight[-1][0].epoch >= 1  # the stream crossed an epoch boundary


def test_a_sentence_longer_than_the_budget_is_an_error():
    with pytest.raises(ValueError, match="max_tokens=10 is smaller than the longest sentence \\(12 tokens\\)"):
        token_batches(np.array([3, 12]), np.array([4, 5]), max_tokens=10, seed=0, epoch=0)
