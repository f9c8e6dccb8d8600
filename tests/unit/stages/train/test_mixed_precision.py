"""fp16 training with dynamic loss scaling, through the loop the train stage runs.

The DeepSpeed engine is the real one, in fp16, on the CPU: DeepSpeed refuses fp16 on
a CPU only in its capability check, which these tests lift. Everything after it (the
fp16 optimizer wrapper, the overflow check, the loss scaler, our loop's accounting)
is the code a GPU runs.
"""

from __future__ import annotations

import socket
import time

import pytest
import torch


@pytest.fixture
def fp16_loop(tokenized, monkeypatch):
    """A TrainLoop around a tiny Transformer in a real fp16 DeepSpeed engine."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    from stages.train.batching import batches_from
    from stages.train.config import ModelSpec, TrainConfig, TrainStageConfig
    from stages.train.data import TokenizedSplit
    from stages.train.loop import TrainLoop, build_engine
    from stages.train.model_file import build_for_vocabulary, vocabulary_facts
    from stages.train.progress import TrainingProgress

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(get_accelerator(), "is_fp16_supported", lambda: True)
    deepspeed.init_distributed(dist_backend="gloo")

    train = TokenizedSplit(tokenized, "train")
    facts = vocabulary_facts(tokenized, train.vocab)
    config = TrainStageConfig(model=ModelSpec(name="t", family="transformer", preset="tiny"),
                              train=TrainConfig(use_gpu=True, precision="fp16", max_steps=10, log_every=1,
                                                warmup_steps=4, max_tokens=300))
    torch.manual_seed(0)
    engine = build_engine(build_for_vocabulary(config.model, facts), config.train, "fp16")
    rows: list[dict] = []
    progress = TrainingProgress(hardware={"precision": "fp16", "peak_flops_total": 1e12})
    loop = TrainLoop(engine, config, facts, train, TokenizedSplit(tokenized, "valid"), 0, 1, progress, [], None,
                     rows.extend)
    batches = batches_from(progress.position, train.src_lengths, train.tgt_lengths, 300, seed=1)
    started = time.perf_counter()
    return loop, lambda: loop.train_update(batches, started), rows


def _weights(engine) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in engine.module.named_parameters()}


def test_an_overflowing_update_is_skipped_and_counted(fp16_loop):
    loop, update, rows = fp16_loop
    engine = loop.engine
    assert next(engine.module.parameters()).dtype == torch.float16
    assert update() and update()
    assert rows[-1]["skipped_updates"] == 0 and rows[-1]["loss_scale"] == 2.0 ** 16
    weights, lr = _weights(engine), engine.get_lr()[0]

    # One gradient made infinite: the update must be skipped, and nothing else change.
    hook = engine.module.encoder[0].feed_forward.inner.weight.register_hook(lambda grad: grad * float("inf"))
    assert update()
    hook.remove()
    assert loop.progress.skipped_updates == 1 and rows[-1]["skipped_updates"] == 1
    assert loop.progress.step == 3 and rows[-1]["step"] == 3  # the attempt counts as an update
    assert all(torch.equal(weights[name], tensor) for name, tensor in _weights(engine).items())
    assert engine.get_lr()[0] == lr  # the schedule did not move either
    assert rows[-1]["loss_scale"] <= 2.0 ** 16

    # Back to finite gradients: the next update trains again, and the count stays.
    scale = rows[-1]["loss_scale"]
    assert update()
    assert loop.progress.skipped_updates == 1
    assert not torch.equal(weights["encoder.0.feed_forward.inner.weight"],
                           engine.module.encoder[0].feed_forward.inner.weight)
    assert engine.get_lr()[0] > lr and rows[-1]["loss_scale"] == scale
    assert all(torch.isfinite(torch.tensor([row["train_loss"], row["grad_norm"]])).all()
               for row in rows if row["step"] != 3)


def test_the_loss_scale_halves_at_each_overflow_down_to_a_floor(fp16_loop):
    loop, update, rows = fp16_loop
    engine = loop.engine
    layer = engine.module.decoder[0].feed_forward.outer.weight
    hook = layer.register_hook(lambda grad: grad * float("inf"))
    scales = []
    for _ in range(4):
        update()
        scales.append(rows[-1]["loss_scale"])
    hook.remove()
    assert loop.progress.skipped_updates == 4
    # Hysteresis 2: the first overflow only uses up the hysteresis; then it halves.
    assert scales[-1] < scales[0] and all(b <= a for a, b in zip(scales, scales[1:]))
    assert all(b in (a, a / 2) for a, b in zip(scales, scales[1:]))
