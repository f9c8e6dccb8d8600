"""What the train stage's engine and loop add to a training step: nothing a plain PyTorch
step does not do. The ATen operations of one update, counted with a dispatch mode, as
a proxy for kernel launches (on a GPU, about 10 us each), and the host syncs
(``.item()``-like reads of a tensor) and device-wide synchronizes that would stop the
host from queueing work ahead of a GPU. On the CPU: the counts are the GPU's."""

from __future__ import annotations

import pytest
import torch

from benchmarks.training.step_overhead import CountOps
from tests.train_loops import single_process_distributed, train_loop

pytestmark = pytest.mark.trains  # builds a DeepSpeed engine and trains


@pytest.fixture
def device_synchronizes(monkeypatch) -> list[int]:
    from deepspeed.accelerator import get_accelerator

    accelerator, count = get_accelerator(), [0]
    original = accelerator.synchronize

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(accelerator, "synchronize", counted)
    return count


def plain_step(model, batch, pad_id: int, label_smoothing: float, clipping: float):
    """A hand-written PyTorch update with the same recipe: the forward under bf16
    autocast, the label-smoothed loss per target token, backward, clipping, fused Adam."""
    from stages.shared.models.loss import translation_loss

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, 10, label_smoothing, pad_id)
        (loss / batch.target_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clipping, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def test_the_train_step_runs_the_plain_step_s_operations_without_host_syncs(tokenized, monkeypatch,
                                                                              device_synchronizes):
    from stages.shared.inference.model_file import build_for_vocabulary, vocabulary_facts
    from stages.train.batching import token_batches

    single_process_distributed(monkeypatch, "gloo")
    # The engine a GPU trains bf16 with, built on the CPU; rows logged every 1,000 updates.
    run = train_loop(tokenized, "bf16", use_gpu=True, gradient_clipping=1.0, label_smoothing=0.1, log_every=1000)
    assert type(run.engine.optimizer) is torch.optim.Adam  # not wrapped in FP16_UnfusedOptimizer
    assert not run.engine.enable_backward_allreduce  # one worker: nothing to all-reduce
    for _ in range(3):
        assert run.update()
    device_synchronizes[0] = 0
    with CountOps() as product:
        assert run.update()
    assert product.host_syncs == 0 and device_synchronizes[0] == 0, product.ops.most_common(10)

    split = run.loop.train_split
    facts = vocabulary_facts(tokenized, split.vocab)
    first = token_batches(split.src_lengths, split.tgt_lengths, 300, seed=1, epoch=0)[0]
    step = plain_step(build_for_vocabulary(run.loop.config.model, facts), split.batch(first), run.loop.pad_id, 0.1, 1.0)
    for _ in range(3):
        step()
    with CountOps() as plain:
        step()
    assert abs(product.total - plain.total) <= 0.02 * plain.total, (product.total, plain.total,
                                                                   (product.ops - plain.ops).most_common(8),
                                                                   (plain.ops - product.ops).most_common(8))


def test_the_counted_flops_are_the_sum_of_each_sentence_s(tokenized, monkeypatch):
    """Counted once per distinct length pair, the totals are the per-sentence sum."""
    from stages.shared.models.flops import training_flops

    single_process_distributed(monkeypatch, "gloo")
    run = train_loop(tokenized, "fp32", use_gpu=False)
    split, loop = run.loop.train_split, run.loop
    from stages.train.batching import token_batches

    for indices in token_batches(split.src_lengths, split.tgt_lengths, 300, seed=1, epoch=0)[:5]:
        batch = split.batch(indices)
        for source_logits in (True, False):
            expected = sum(training_flops(loop.state.model, int(s), int(t), source_logits)
                           for s, t in zip(batch.src_lengths, batch.tgt_lengths))
            assert loop._counted_flops(batch, source_logits) == expected


def test_the_per_batch_reseed_draws_what_torch_manual_seed_draws_on_the_cpu():
    """The loop reseeds dropout at every batch with seed_generator, which skips
    torch.manual_seed's queued seeding of every GPU: the masks must not change (a resumed
    run redraws them, and the stage's keys promise the same outputs)."""
    from stages.train.loop import seed_generator

    torch.manual_seed(12345)
    expected = torch.nn.functional.dropout(torch.ones(64, 64), p=0.3)
    torch.manual_seed(999)
    seed_generator(torch.device("cpu"), 12345)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(64, 64), p=0.3), expected)
