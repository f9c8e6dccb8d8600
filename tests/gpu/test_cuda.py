"""The CUDA path: run by benchmarks/gpu_check.sh on a machine with a GPU, skipped
elsewhere. Each test checks on CUDA what a CPU test checks on the CPU, or what only a
GPU can show (which attention kernel runs, bf16 autocast and DeepSpeed's fp16 mode)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def cuda_distributed(monkeypatch):
    from tests.train_loops import single_process_distributed

    single_process_distributed(monkeypatch, "nccl")


def _models():
    from stages.shared.models.decoder_only.model import DecoderOnlyTranslator
    from stages.shared.models.decoder_only.config import PRESETS as DECODER_ONLY_PRESETS
    from stages.shared.models.transformer.config import PRESETS as TRANSFORMER_PRESETS
    from stages.shared.models.transformer.model import Transformer

    torch.manual_seed(0)
    return {"transformer": Transformer(TRANSFORMER_PRESETS["small"], 1000, 1000),
            "decoder_only": DecoderOnlyTranslator(DECODER_ONLY_PRESETS["small"], 1000, 4, 5)}


def _batch(device: str):
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(6, 1000, (16, 21), generator=generator)
    tgt = torch.randint(6, 1000, (16, 17), generator=generator)
    for row in range(16):  # ragged: padding at the end of most rows
        src[row, 21 - row:] = 0
        tgt[row, 17 - row // 2:] = 0
    tgt[:, 0] = 2
    return src.to(device), tgt.to(device)


@pytest.mark.parametrize("family", ["transformer", "decoder_only"])
def test_attention_runs_only_fused_kernels_in_bf16(family):
    """Flash or memory-efficient attention for every call, padding masks included:
    with the math fallback excluded, any call that needs it raises."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from stages.shared.models.cross_entropy import label_smoothed_cross_entropy

    model = _models()[family].cuda().train()
    src, tgt = _batch("cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), \
            torch.autocast("cuda", dtype=torch.bfloat16):
        loss, _ = label_smoothed_cross_entropy(model(src, tgt), torch.roll(tgt, -1, 1))
    loss.backward()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("family", ["transformer", "decoder_only"])
def test_fused_kernels_agree_with_the_math_path(family):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = _models()[family].cuda().eval()
    src, tgt = _batch("cuda")
    with torch.no_grad():
        with sdpa_kernel([SDPBackend.MATH]):
            reference = model(src, tgt)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            fused = model(src, tgt)
    keep = tgt != 0
    torch.testing.assert_close(fused[keep], reference[keep], atol=2e-4, rtol=2e-4)


def test_a_training_step_on_cuda_matches_the_cpu():
    """Our model code computes the same thing on both devices: compared in float64, where
    neither device's fp32 arithmetic (on an H200 the fp32 weight gradient here was about
    4e-4 of its size away from the CPU's, with TF32 off and the math attention path)
    hides a difference the code makes."""
    from stages.shared.models.cross_entropy import label_smoothed_cross_entropy

    losses, grads = {}, {}
    for device in ("cpu", "cuda"):
        model = _models()["transformer"].double().to(device).eval()  # eval: no dropout masks to differ
        src, tgt = _batch(device)
        loss, _ = label_smoothed_cross_entropy(model(src, tgt), torch.roll(tgt, -1, 1))
        loss.backward()
        losses[device] = loss.item()
        grads[device] = model.encoder[0].feed_forward.inner.weight.grad.cpu()
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-10)
    torch.testing.assert_close(grads["cuda"], grads["cpu"], atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("beam", [1, 4])
def test_beam_search_on_cuda_finds_what_the_cpu_finds(beam):
    from stages.shared.inference.beam import beam_search

    model = _models()["transformer"].eval()
    src, _ = _batch("cpu")
    results = {}
    for device in ("cpu", "cuda"):
        results[device] = beam_search(model.to(device), src.to(device), beam, bos_id=2, eos_id=3, pad_id=0,
                                      max_length_b=12)
    cpu_tokens = [[h.tokens for h in hyps] for hyps in results["cpu"]]
    cuda_tokens = [[h.tokens for h in hyps] for hyps in results["cuda"]]
    assert cuda_tokens == cpu_tokens


def test_bf16_trains_on_cuda_with_fp32_weights_and_no_host_sync(tokenized, cuda_distributed, monkeypatch):
    from tests.train_loops import train_loop
    from benchmarks.training.step_overhead import CountOps

    run = train_loop(tokenized, "bf16", use_gpu=True, max_tokens=2000, gradient_clipping=1.0)
    assert next(run.engine.module.parameters()).dtype == torch.float32  # bf16 is the loop's autocast
    assert type(run.engine.optimizer) is torch.optim.Adam and run.engine.device.type == "cuda"
    for _ in range(30):
        assert run.update()
    first, last = run.rows[0]["train_loss"], run.rows[-1]["train_loss"]
    assert last < first and all(torch.isfinite(torch.tensor(row["grad_norm"])) for row in run.rows)
    # Rows every 1,000 updates from here: an update without a logged row reads nothing back.
    run.loop.training = run.loop.training.model_copy(update={"log_every": 1000})
    synchronizes = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: synchronizes.append(1))
    with CountOps() as counter:
        assert run.update()
    assert counter.host_syncs == 0 and not synchronizes, counter.ops.most_common(10)


@pytest.mark.parametrize("check", ["overflow", "halving"])
def test_deepspeed_fp16_skips_and_counts_overflows_on_cuda(tokenized, cuda_distributed, check):
    from tests.train_loops import train_loop
    from tests.unit.stages.train.test_mixed_precision import (
        check_overflow_is_skipped_and_counted,
        check_scale_halves_at_each_overflow,
    )

    run = train_loop(tokenized, "fp16", use_gpu=True)
    assert run.engine.device.type == "cuda"
    {"overflow": check_overflow_is_skipped_and_counted, "halving": check_scale_halves_at_each_overflow}[check](run)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stages_train_on_cuda(tokenized, cuda_distributed, stage):
    """ZeRO 1-3 in bf16 with the fused optimizer: the loop's accounting holds."""
    from tests.train_loops import train_loop

    run = train_loop(tokenized, "bf16", use_gpu=True, max_tokens=2000, zero_stage=stage)
    assert run.engine.zero_optimization_stage() == stage
    for _ in range(10):
        assert run.update()
    assert run.rows[-1]["train_loss"] < run.rows[0]["train_loss"]
