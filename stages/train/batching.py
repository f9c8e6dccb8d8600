"""Token-budget batches with length bucketing, a deterministic order per epoch, and a
position that can be saved and resumed.

Vaswani et al. (2017), section 5.1: "Sentence pairs were batched together by
approximate sequence length. Each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens." A batch here
holds pairs of similar length whose padded size, batch size x longest sentence, stays
within ``max_tokens`` on both sides.

The order of an epoch depends only on (seed, epoch): pairs are shuffled, sorted by
length inside windows of ``bucket_windows`` batches' worth of pairs (so the batches
are dense but the epoch is still random), cut into batches, and the batches shuffled.
Every worker computes the same list and takes every ``world_size``-th batch from its
``rank``, so the workers need no communication and a restart reproduces the order.
Resuming at (epoch, step) continues with the batch after the last one trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchPosition:
    """Where training is in the data: saved with every checkpoint."""

    epoch: int = 0
    step_in_epoch: int = 0  # batches of this worker already trained this epoch


def token_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int,
                  bucket_windows: int = 100) -> list[np.ndarray]:
    """All batches of one epoch (arrays of pair indices), identical on every worker."""
    if len(src_lengths) != len(tgt_lengths):
        raise ValueError("source and target length arrays differ in size")
    longest = int(max(src_lengths.max(initial=0), tgt_lengths.max(initial=0)))
    if longest > max_tokens:
        raise ValueError(f"max_tokens={max_tokens} is smaller than the longest sentence ({longest} tokens)")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(src_lengths))
    pair_lengths = np.maximum(src_lengths, tgt_lengths)
    mean_length = max(1.0, float(pair_lengths.mean())) if len(pair_lengths) else 1.0
    window = max(1, int(bucket_windows * max_tokens / mean_length))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), window):
        chunk = order[start:start + window]
        chunk = chunk[np.argsort(pair_lengths[chunk], kind="stable")]
        batches.extend(_fill(chunk, src_lengths, tgt_lengths, max_tokens))
    return [batches[i] for i in rng.permutation(len(batches))]


def _fill(sorted_indices: np.ndarray, src_lengths: np.ndarray, tgt_lengths: np.ndarray,
          max_tokens: int) -> list[np.ndarray]:
    batches, current, longest_src, longest_tgt = [], [], 0, 0
    for index in sorted_indices:
        src_longest = max(longest_src, int(src_lengths[index]))
        tgt_longest = max(longest_tgt, int(tgt_lengths[index]))
        size = len(current) + 1
        if current and (size * src_longest > max_tokens or size * tgt_longest > max_tokens):
            batches.append(np.array(current))
            current, src_longest, tgt_longest = [], int(src_lengths[index]), int(tgt_lengths[index])
        current.append(index)
        longest_src, longest_tgt = src_longest, tgt_longest
    if current:
        batches.append(np.array(current))
    return batches


def worker_batches(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This worker's share: every world_size-th batch; the tail is dropped so that all
    workers take the same number of steps (a collective would otherwise hang)."""
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]


def batches_from(position: BatchPosition, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int,
                 seed: int, rank: int = 0, world_size: int = 1):
    """Yield (position after the batch, batch) from ``position`` on, across epochs."""
    epoch, skip = position.epoch, position.step_in_epoch
    while True:
        mine = worker_batches(token_batches(src_lengths, tgt_lengths, max_tokens, seed, epoch), rank, world_size)
        for step in range(skip, len(mine)):
            yield BatchPosition(epoch, step + 1), mine[step]
        epoch, skip = epoch + 1, 0
