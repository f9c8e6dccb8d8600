"""Teacher-forcing batches read from a tokenize artifact."""

from __future__ import annotations

import numpy as np
import torch


def test_teacher_forcing_batches_shift_the_target_and_pad(tokenized):
    from stages.train.data import TokenizedSplit

    split = TokenizedSplit(tokenized, "train")
    indices = np.array([0, 5, 9])
    batch = split.batch(indices)
    for row, index in enumerate(indices):
        length = split.tgt_lengths[index]
        assert batch.tgt_out[row, length - 1] == split.vocab["special_ids"]["eos"]
        assert batch.tgt_in[row, 0] == split.vocab["special_ids"]["bos"]
        assert torch.equal(batch.tgt_in[row, 1:length], batch.tgt_out[row, :length - 1])
        assert (batch.tgt_out[row, length:] == 0).all() and (batch.tgt_in[row, length:] == 0).all()
        assert (batch.src[row, split.src_lengths[index]:] == 0).all()
        assert (batch.src[row, :split.src_lengths[index]] != 0).all()
    assert batch.target_tokens == int(split.tgt_lengths[indices].sum())
