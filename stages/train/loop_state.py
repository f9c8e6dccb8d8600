"""What the training loop and its schedules share (``loop.py``, ``validation.py``,
``checkpoints.py``, ``row_log.py``): the engine, this worker's place in the group, the
run's progress and its curve, and the few operations all of them use."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from stages.train.progress import TrainingProgress


class Curve:
    """The run's logged rows: kept for the checkpoint's history and sent to the tracker
    (rank 0's live MLflow logging) as they come. A resumed run sends the rows after its
    checkpoint again, under the same steps."""

    def __init__(self, rows: list[dict], sink: Callable | None = None):
        self.rows, self.sink = rows, sink

    def record(self, row: dict) -> None:
        self.rows.append(row)
        if self.sink is not None:
            self.sink([row])

    def drain(self) -> None:
        """Return once the tracker has every row: the curve complete before the stage ends."""
        if self.sink is not None:
            self.sink.drain()


@dataclass
class LoopState:
    engine: Any  # the DeepSpeed engine
    rank: int
    world: int
    progress: TrainingProgress
    curve: Curve
    autocast: bool  # bf16 autocast around the model's forward (deepspeed_config.bf16_autocast)

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.module

    @property
    def device(self) -> torch.device:
        return self.engine.device

    def precision(self) -> contextlib.AbstractContextManager:
        if self.autocast:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Adds the wall time inside to the run's ``time_spent[part]``: where a run's time
        goes besides its updates (train_report.json's ``seconds_<part>``). On a GPU the
        host time of ``logging`` (it reads the losses back) includes waiting for the device."""
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = self.progress.time_spent
            spent[part] = spent.get(part, 0.0) + time.perf_counter() - started

    def all_reduce(self, values: list) -> list[float]:
        """``values`` (numbers, or one-element tensors on the device) summed over the
        workers, read back in one copy. The tensor lives on the worker's device: NCCL
        reduces CUDA tensors only, gloo CPU ones."""
        if self.world == 1 or not dist.is_initialized():
            return [float(v) for v in values]
        tensor = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=self.device).reshape(())
                              for v in values])
        dist.all_reduce(tensor)
        return tensor.tolist()
