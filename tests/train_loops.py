"""A TrainLoop in this process, without Ray: a real DeepSpeed engine around a tiny
model, on the tokenize fixture, for tests that drive updates one at a time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

from tests.s3_server import free_port


@dataclass
class LoopUnderTest:
    loop: object  # stages.train.loop.TrainLoop
    update: Callable[[], bool]  # one optimizer update, as the train stage runs it
    rows: list[dict]  # the metrics rows it logged, one per update

    @property
    def engine(self):
        return self.loop.engine


def single_process_distributed(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """torch.distributed for a world of one, as DeepSpeed needs it."""
    from stages.train.engine import import_deepspeed

    deepspeed = import_deepspeed()

    port = free_port()
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend=backend)


def train_loop(tokenized: Path, precision: str, use_gpu: bool, family: str = "transformer",
               max_tokens: int = 300, **train_settings) -> LoopUnderTest:
    from stages.shared.inference.model_file import build_for_vocabulary, vocabulary_facts
    from stages.shared.models.spec import ModelSpec
    from stages.train.batching import batches_from
    from stages.train.config import TrainConfig, TrainStageConfig
    from stages.train.data import TokenizedSplit
    from stages.train.engine import build_engine
    from stages.train.deepspeed_config import bf16_autocast
    from stages.train.loop import TrainLoop
    from stages.train.plan import as_configured
    from stages.train.loop_state import Curve, LoopState
    from stages.train.row_log import RowLog
    from stages.train.progress import TrainingProgress

    train = TokenizedSplit(tokenized, "train")
    facts = vocabulary_facts(tokenized, train.vocab)
    settings = {"max_steps": 100, "log_every": 1, "warmup_steps": 4, **train_settings}
    config = TrainStageConfig(model=ModelSpec(name="t", family=family, preset="tiny"),
                              train=TrainConfig(use_gpu=use_gpu, precision=precision, max_tokens=max_tokens, **settings))
    torch.manual_seed(0)
    run = as_configured(config.train)
    engine = build_engine(build_for_vocabulary(config.model, facts), config.train, run, precision)
    rows: list[dict] = []
    progress = TrainingProgress(hardware={"precision": precision, "peak_flops_total": 1e12})
    state = LoopState(engine, 0, 1, progress, Curve([], rows.extend), autocast=bf16_autocast(precision))
    # Updates one at a time, without the schedules (validations, checkpoints).
    loop = TrainLoop(state, config, run, train, facts["special_ids"]["pad"], RowLog(state, config.train.log_every, {}),
                     validations=[], checkpoints=None)
    batches = batches_from(progress.position, train.src_lengths, train.tgt_lengths, max_tokens, seed=1)
    started = time.perf_counter()
    return LoopUnderTest(loop, lambda: loop.train_update(batches, started), rows)


def weights(engine) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in engine.module.named_parameters()}
