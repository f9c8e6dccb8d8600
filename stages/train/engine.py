"""The DeepSpeed engine a worker trains with."""

from __future__ import annotations

import os
import sys
from typing import Callable

import torch

from stages.train.config import TrainConfig
from stages.train.deepspeed_config import deepspeed_config
from stages.train.schedule import NOTHING_SPENT, Spent, learning_rate


def build_engine(model: torch.nn.Module, training: TrainConfig, precision: str,
                 spent: Callable[[], Spent] = lambda: NOTHING_SPENT):
    """The DeepSpeed engine that trains ``model``: Adam or AdamW under our learning-rate
    schedule, in the precision the workers agreed on (deepspeed_config.py). ``spent``
    returns the updates, counted FLOPs and target tokens trained so far, by which a
    cosine over a FLOPs or tokens budget decays.

    The optimizer is torch's fused implementation (one kernel for all parameters, on a
    CPU as on a GPU) rather than one kernel per parameter and operation; at ZeRO stage 0
    outside fp16 DeepSpeed calls it as it is (deepspeed_config.py). DeepSpeed's fp16 and
    ZeRO modes wrap it and call it on their fp32 master weights.
    ``train.compile`` compiles the model's forward in place (parameter names, and so
    checkpoints, unchanged), with dynamic shapes since every batch has its own.
    """
    deepspeed = import_deepspeed()
    width = getattr(model.config, "d_model", None) or model.config.hidden
    if training.compile:
        model.compile(dynamic=True)
    optimizer_class = torch.optim.AdamW if training.optimizer == "adamw" else torch.optim.Adam
    # lr=1: the LambdaLR factor is the learning rate itself.
    optimizer = optimizer_class(model.parameters(), lr=1.0, betas=training.betas, eps=training.eps,
                                weight_decay=training.weight_decay, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: learning_rate(update + 1, training, width, spent()))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=deepspeed_config(training, precision))
    if engine.dp_world_size == 1 and engine.zero_optimization_stage() == 0:
        # One worker has nothing to reduce: DeepSpeed would still flatten every gradient,
        # all-reduce it over a group of one and copy it back, each update.
        engine.enable_backward_allreduce = False
    return engine


# DeepSpeed's CPU shared-memory allreduce, a C++ extension: see skip_inference_allreduce_build.
INFERENCE_ALLREDUCE_OP = "deepspeed_shm_comm"


def skip_inference_allreduce_build(deepspeed) -> None:
    """Tell DeepSpeed not to build its CPU shared-memory allreduce. Its communication
    backend builds that extension at every engine's start on a CPU (47 s on 2 cores the
    first time on a machine), for tensor-parallel inference's ``inference_all_reduce``
    alone; training reduces gradients through torch.distributed and never calls it. The
    build also takes torch's lock file, which a process killed mid-build (a preempted
    worker, a deadline) leaves behind: every later build on that machine then waited on
    it forever, with no message. DeepSpeed keeps the result of its op probe in one
    module-level dict so that edits to it persist; an op marked incompatible there is
    not built."""
    compatible = getattr(deepspeed.ops, "__compatible_ops__", None)
    if isinstance(compatible, dict):
        compatible[INFERENCE_ALLREDUCE_OP] = False


def import_deepspeed():
    """``deepspeed``, imported without MLflow, and told not to build its CPU inference
    allreduce (skip_inference_allreduce_build). DeepSpeed's autotuner imports MLflow
    whenever it is installed, to log tuning trials; training never uses it, and importing
    it cost each train worker 0.9 s of a 2-core CPU before its first update
    (benchmarks/stage_overhead.py). MLflow stays importable afterwards."""
    if "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available():
        # Named, not detected: detection warns "Setting accelerator to CPU. If you have GPU
        # ..." once per process (eight times in the smoke run), on every CPU machine.
        os.environ["DS_ACCELERATOR"] = "cpu"
    if "deepspeed" in sys.modules or "mlflow" in sys.modules:
        import deepspeed
    else:
        sys.modules["mlflow"] = None  # an import of it raises ImportError: DeepSpeed goes without
        try:
            import deepspeed
        finally:
            del sys.modules["mlflow"]
    skip_inference_allreduce_build(deepspeed)
    return deepspeed
