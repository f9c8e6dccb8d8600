"""fp16 training with dynamic loss scaling, through the loop the train stage runs.

The DeepSpeed engine is the real one, in fp16, on the CPU: DeepSpeed refuses fp16 on
a CPU only in its capability check, which these tests lift. Everything after it (the
fp16 optimizer wrapper, the overflow check, the loss scaler, our loop's accounting)
is the code a GPU runs; tests/gpu runs the same checks on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from tests.train_loops import (
    LoopUnderTest,
    single_process_distributed,
    train_loop,
    weights,
)

pytestmark = pytest.mark.trains  # builds DeepSpeed engines


@pytest.fixture
def fp16_loop(tokenized, monkeypatch) -> LoopUnderTest:
    from deepspeed.accelerator import get_accelerator

    monkeypatch.setattr(get_accelerator(), "is_fp16_supported", lambda: True)
    single_process_distributed(monkeypatch, "gloo")
    return train_loop(tokenized, "fp16", use_gpu=True)


def check_overflow_is_skipped_and_counted(run: LoopUnderTest) -> None:
    engine, progress, rows = run.engine, run.loop.progress, run.rows
    assert next(engine.module.parameters()).dtype == torch.float16
    assert run.update() and run.update()
    assert rows[-1]["skipped_updates"] == 0 and rows[-1]["loss_scale"] == 2.0 ** 16
    before, lr = weights(engine), engine.get_lr()[0]

    # One gradient made infinite: the update must be skipped, and nothing else change.
    layer = engine.module.encoder[0].feed_forward.inner.weight
    hook = layer.register_hook(lambda grad: grad * float("inf"))
    assert run.update()
    hook.remove()
    assert progress.skipped_updates == 1 and rows[-1]["skipped_updates"] == 1
    assert progress.step == 3 and rows[-1]["step"] == 3  # the attempt counts as an update
    assert all(torch.equal(before[name], tensor) for name, tensor in weights(engine).items())
    assert engine.get_lr()[0] == lr  # the schedule did not move either
    assert rows[-1]["loss_scale"] <= 2.0 ** 16

    # Back to finite gradients: the next update trains again, and the count stays.
    scale = rows[-1]["loss_scale"]
    assert run.update()
    assert progress.skipped_updates == 1
    assert not torch.equal(before["encoder.0.feed_forward.inner.weight"], layer)
    assert engine.get_lr()[0] > lr and rows[-1]["loss_scale"] == scale
    assert all(torch.isfinite(torch.tensor([row["train_loss"], row["grad_norm"]])).all()
               for row in rows if row["step"] != 3)


def check_scale_halves_at_each_overflow(run: LoopUnderTest) -> None:
    layer = run.engine.module.decoder[0].feed_forward.outer.weight
    hook = layer.register_hook(lambda grad: grad * float("inf"))
    scales = []
    for _ in range(4):
        run.update()
        scales.append(run.rows[-1]["loss_scale"])
    hook.remove()
    assert run.loop.progress.skipped_updates == 4
    # Hysteresis 2: the first overflow only uses up the hysteresis; then each halves it.
    assert scales[-1] < scales[0] and all(b in (a, a / 2) for a, b in zip(scales, scales[1:]))


def test_an_overflowing_update_is_skipped_and_counted(fp16_loop):
    check_overflow_is_skipped_and_counted(fp16_loop)


def test_the_loss_scale_halves_at_each_overflow(fp16_loop):
    check_scale_halves_at_each_overflow(fp16_loop)
