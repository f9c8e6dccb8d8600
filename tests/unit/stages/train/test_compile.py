"""train.compile compiles one graph of a model for training batches of every shape a run
meets, and one for validation's. Traced with torch.compile's "eager" backend: the graphs and
guards dynamo makes, without generating code (seconds, not minutes). What inductor's code
generation adds (it specializes a 1-d convolution's backward to one length: ConvS2S refuses
compile) is measured by benchmarks/training/compile_cost.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.trains  # torch.compile traces models

FAMILIES = ("transformer", "decoder_only")  # the others refuse train.compile (ModelFamily.compile_refused)


def _indices_of_lengths(split, shapes: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """Batches of the training split with the given (sentences, source length, target
    length): sentences whose lengths are at most those, with one of each at the bound."""
    batches = []
    for sentences, source, target in shapes:
        longest_source = np.flatnonzero((split.src_lengths == source) & (split.tgt_lengths <= target))[:1]
        longest_target = np.flatnonzero((split.src_lengths <= source) & (split.tgt_lengths == target))[:1]
        rest = np.flatnonzero((split.src_lengths <= source) & (split.tgt_lengths <= target))
        bounds = np.unique(np.concatenate([longest_source, longest_target]))
        chosen = np.concatenate([bounds, np.setdiff1d(rest, bounds)[:sentences - len(bounds)]])
        assert len(longest_source) and len(longest_target) and len(chosen) == sentences, (sentences, source, target)
        batch = split.batch(chosen)
        assert tuple(batch.src.shape) == (sentences, source) and batch.tgt_in.size(1) == target
        batches.append(batch)
    return batches


@pytest.mark.parametrize("family", FAMILIES)
def test_a_compiled_model_compiles_one_graph_for_batches_of_every_shape(tokenized, family, monkeypatch):
    """Training batches: the first's source and target are equally long (duck sizing
    would tie them, and the next batch would compile the model again); then batch sizes
    and lengths vary independently: one graph. The forward compiled is the one training
    calls (the decoder-only model's loss calls its forward_all, not the module).
    Validation, in eval mode without gradients, is one graph more, for batches of every
    shape, and training goes on with its own; the decoder-only model's training compiles
    once more when its source loss weighs nothing (an update far past ae_steps)."""
    import torch.fx.experimental._config as symbolic_shapes
    from torch._dynamo.utils import counters

    from stages.shared.inference.model_file import build_for_vocabulary, vocabulary_facts
    from stages.shared.models.loss import translation_loss
    from stages.shared.models.spec import ModelSpec
    from stages.train import engine
    from stages.train.data import TokenizedSplit

    monkeypatch.setattr(engine, "COMPILE_BACKEND", "eager")
    split = TokenizedSplit(tokenized, "train")
    facts = vocabulary_facts(tokenized, split.vocab)
    model = build_for_vocabulary(ModelSpec(name="m", family=family, preset="tiny"), facts)
    pad = facts["special_ids"]["pad"]
    first, second, third, fourth = _indices_of_lengths(split, [(4, 12, 12), (6, 14, 10), (3, 13, 15), (5, 14, 17)])

    def train(batch, step: int = 0) -> None:
        loss, _ = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, step, 0.1, pad)
        loss.backward()

    def validate(batch) -> None:  # as TrainLoop._validate calls the model
        model.eval()
        with torch.no_grad():
            translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, 10**9, 0.0, pad)
        model.train()

    torch._dynamo.reset()
    counters.clear()
    counters["stats"]["unique_graphs"] = 5  # an earlier run's in this process: not this one's
    duck_shape = symbolic_shapes.use_duck_shape
    try:
        engine.compile_in_place(model)
        for batch in (first, second, third, fourth):
            train(batch)
        assert counters["frames"]["ok"] == 1, "the training forward was not compiled (or broke into parts)"
        assert engine.compiled_graphs() == 1
        validate(third)
        validate(first)
        train(second)
        assert engine.compiled_graphs() == 2
        train(fourth, step=10**9)
        assert engine.compiled_graphs() == (3 if family == "decoder_only" else 2)
    finally:
        symbolic_shapes.use_duck_shape = duck_shape  # the process's setting, as other tests expect it
        torch._dynamo.reset()


@pytest.mark.parametrize("family, why", [("rnn", "does not trace nn.GRU"), ("convs2s", "1-d convolution's backward")])
def test_compile_is_refused_for_a_family_it_cannot_compile_once(family, why):
    from stages.shared.models.spec import ModelSpec
    from stages.train.config import TrainConfig, TrainStageConfig

    with pytest.raises(ValueError, match=f"train.compile is refused for the {family} family: .*{why}"):
        TrainStageConfig(model=ModelSpec(name="m", family=family, preset="tiny"),
                         train=TrainConfig(max_steps=5, compile=True))
    TrainStageConfig(model=ModelSpec(name="m", family=family, preset="tiny"), train=TrainConfig(max_steps=5))
