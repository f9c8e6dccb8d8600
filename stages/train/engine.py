"""The DeepSpeed engine a worker trains with."""

from __future__ import annotations

import os
import sys
from typing import Callable

import torch

from stages.train.config import TrainConfig
from stages.train.deepspeed_config import deepspeed_config
from stages.train.plan import RunPlan
from stages.train.schedule import NOTHING_SPENT, Spent, learning_rate


def build_engine(model: torch.nn.Module, training: TrainConfig, run: RunPlan, precision: str,
                 spent: Callable[[], Spent] = lambda: NOTHING_SPENT):
    """The DeepSpeed engine that trains ``model``: Adam or AdamW under our learning-rate
    schedule (to the peak rate and over the warmup that ``run`` settled), in the precision
    the workers agreed on (deepspeed_config.py). ``spent`` returns the updates, counted
    FLOPs and target tokens trained so far, by which a cosine over a FLOPs or tokens
    budget decays.

    The optimizer is torch's fused implementation (one kernel for all parameters, on a
    CPU as on a GPU) rather than one kernel per parameter and operation; at ZeRO stage 0
    outside fp16 DeepSpeed calls it as it is (deepspeed_config.py). DeepSpeed's fp16 and
    ZeRO modes wrap it and call it on their fp32 master weights.
    ``train.compile`` compiles the model's forward in place: compile_in_place.
    """
    deepspeed = import_deepspeed()
    width = getattr(model.config, "d_model", None) or model.config.hidden
    if training.compile:
        compile_in_place(model)
    optimizer_class = torch.optim.AdamW if training.optimizer == "adamw" else torch.optim.Adam
    # lr=1: the LambdaLR factor is the learning rate itself.
    optimizer = optimizer_class(model.parameters(), lr=1.0, betas=training.betas, eps=training.eps,
                                weight_decay=training.weight_decay, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: learning_rate(update + 1, training, run, width, spent()))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=deepspeed_config(training, precision))
    if engine.dp_world_size == 1 and engine.zero_optimization_stage() == 0:
        # One worker has nothing to reduce: DeepSpeed would still flatten every gradient,
        # all-reduce it over a group of one and copy it back, each update.
        engine.enable_backward_allreduce = False
    return engine


# The backend torch.compile hands the traced graphs to. Tests trace with "eager": dynamo's
# graphs and guards without generating code (inductor can add guards of its own, as for
# ConvS2S: benchmarks/training/compile_cost.py measures them).
COMPILE_BACKEND = "inductor"


def compile_in_place(model: torch.nn.Module) -> None:
    """Compile ``model``'s forward in place (parameter names, and so checkpoints,
    unchanged), one graph for every batch shape: with symbolic batch size and lengths,
    since token-budget batches each have their own. Without duck sizing: by default
    torch.compile gives dimensions of equal size one symbol, so a first batch whose source
    and target are equally long ties the two, and the next batch compiles the model again
    (36 s more for Transformer-Tiny on a 2-core CPU). The setting is the process's: a
    train worker's process compiles nothing else.

    A run still compiles a few graphs, each once: training's; validation's (eval mode,
    no gradients); for the decoder-only model, training's again once its source loss
    weighs nothing; and one more for a batch of a single sentence (torch specializes
    sizes 0 and 1), which token budgets make rare: a sentence longer than half of
    ``max_tokens``, or one left over at the end of a length window."""
    import torch.fx.experimental._config as symbolic_shapes
    from torch._dynamo.utils import counters

    symbolic_shapes.use_duck_shape = False
    # A process that compiled an earlier run's model (a worker Ray reuses for the next
    # stage) starts afresh: that model's cached graphs would count against this one's
    # recompilation limit, and its graphs in compiled_graphs.
    torch._dynamo.reset()
    counters["stats"]["unique_graphs"] = 0
    model.compile(dynamic=True, backend=COMPILE_BACKEND)


def compiled_graphs() -> int:
    """How many graphs torch.compile has compiled since compile_in_place: 2 for a run
    whose training and validation each fitted their first graph (compile_in_place says
    when there are more)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


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
    (benchmarks/orchestration/stage_overhead.py). MLflow stays importable afterwards."""
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
