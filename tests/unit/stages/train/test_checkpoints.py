"""Averaging the last checkpoints into the final weights."""

from __future__ import annotations

import torch

from stages.train.checkpoints import average_weights


def test_averaging_checkpoints_is_the_elementwise_mean():
    states = [{"w": torch.full((2, 2), float(value)), "b": torch.tensor([value * 2.0])} for value in (1, 2, 6)]
    averaged = average_weights(states)
    assert torch.equal(averaged["w"], torch.full((2, 2), 3.0)) and torch.equal(averaged["b"], torch.tensor([6.0]))
