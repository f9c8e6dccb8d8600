"""train: one model of the config, trained with DeepSpeed on Ray Train workers.

The stage launches a ``TorchTrainer`` whose workers run ``loop.train_worker`` and
persist their checkpoints under the stage's staging directory (``train_run/``). That
directory survives a crash (the train stage is resumable), so starting the stage
again continues from the newest complete checkpoint, and Ray Train itself restarts a
crashed worker group from it, up to ``max_failures`` times.

When training ends the stage writes, next to the retained DeepSpeed checkpoints:
``model.pt`` (fp32, the average of the last ``average_last`` checkpoints), ``best.pt``
(the best validated weights), both loadable with ``model_file.load_model_file``;
``metrics.jsonl`` (the logged curve); ``train_report.json`` (totals and costs).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from pipeline.config import TrainStageConfig
from pipeline.context import StageContext
from pipeline.hardware import HardwareError, detect_device, resolve_precision
from stages.errors import InputDataError
from stages.train.checkpoints import average_weights, complete_checkpoints, fill_tied_weights, fp32_weights
from stages.train.flops import parameter_counts
from stages.train.model_file import build_for_vocabulary, save_model_file, vocabulary_facts

VERSION = 2
RUN_NAME = "train_run"


def train_model(inputs: dict[str, Path], config: TrainStageConfig, output: Path, ctx: StageContext) -> dict:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from stages.train.loop import train_worker

    train, tokenized = config.train, inputs["tokenize"]
    _check_inputs(tokenized, config)
    world, zero = train.workers, train.zero_stage
    resume = complete_checkpoints(output / RUN_NAME, world, zero)
    resources = {"CPU": train.cpus_per_worker, **({"GPU": 1} if train.use_gpu else {})}
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"config": config.model_dump(mode="json"),
                           "fetch_tokenized": ctx.fetcher("tokenize", tokenized),
                           # Ray Train restores its own run state from RUN_NAME's snapshot; this
                           # covers a run killed before its snapshot named the checkpoint.
                           "resume_from": str(resume[-1].path) if resume else None,
                           "metrics_sink": ctx.metrics_sink},
        scaling_config=ScalingConfig(num_workers=world, use_gpu=train.use_gpu, resources_per_worker=resources),
        torch_config=TorchConfig(backend="nccl" if train.use_gpu else "gloo"),
        run_config=RunConfig(name=RUN_NAME, storage_path=str(output),
                             failure_config=FailureConfig(max_failures=train.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=train.keep_checkpoints)),
    )
    started = time.time()
    trainer.fit()
    checkpoints = complete_checkpoints(output / RUN_NAME, world, zero)
    if not checkpoints:
        raise RuntimeError(f"training {config.model.name!r} ended without a complete checkpoint in {output}")
    return _write_outputs(output, config, tokenized, checkpoints, time.time() - started)


def preflight(config: TrainStageConfig, cpus: int) -> None:
    """Refuse, before anything starts, a train section this machine cannot run: a
    precision its device lacks, a GPU it lacks, more CPUs than its ``cpus`` (Ray Train
    would wait for them forever). For local runs; on a cluster each worker checks its
    own device when it starts."""
    train = config.train
    if train.use_gpu and not torch.cuda.is_available():
        raise HardwareError("train.use_gpu: true, but this machine has no CUDA GPU that torch can use")
    device = detect_device("cuda" if train.use_gpu else "cpu")
    resolve_precision(train.precision, device, "train.precision")
    needed = train.workers * train.cpus_per_worker
    if needed > cpus:
        raise HardwareError(f"train.workers ({train.workers}) x train.cpus_per_worker ({train.cpus_per_worker}) "
                            f"needs {needed} CPUs, but this machine has {cpus}")


def _check_inputs(tokenized: Path, config: TrainStageConfig) -> None:
    index = json.loads((tokenized / "index.json").read_text())
    splits = index["splits"]
    for split in ("train", "valid"):
        if splits[split]["pairs"] == 0:
            raise InputDataError(f"train {config.model.name!r}: the tokenized {split} split is empty")
    if not index.get("append_eos", True):
        raise InputDataError(f"train {config.model.name!r}: needs tokenize.append_eos: true "
                             "(models learn where a translation ends from EOS)")
    vocab = index["vocab"]
    if config.model.family == "decoder_only" and not vocab["joint"]:
        raise InputDataError(f"train {config.model.name!r}: the decoder-only family needs bpe.joint: true")


def _write_outputs(output: Path, config: TrainStageConfig, tokenized: Path, checkpoints: list,
                   seconds_this_attempt: float) -> dict:
    train = config.train
    last = checkpoints[-1]
    averaged = checkpoints[-train.average_last:]
    vocab = json.loads((tokenized / "vocab.json").read_text())
    facts = vocabulary_facts(tokenized, vocab)
    model = build_for_vocabulary(config.model, facts)
    weights = fill_tied_weights(average_weights([fp32_weights(c.path, train.zero_stage) for c in averaged]), model)
    progress = last.progress
    info = {"step": progress["step"], "averaged_steps": [c.step for c in averaged],
            "best_step": progress["best_step"], "best_valid_loss": progress["best_valid_loss"]}
    save_model_file(output / "model.pt", config.model, facts, weights, info)
    if (last.path / "best.pt").is_file():
        best = torch.load(last.path / "best.pt", weights_only=True)
        save_model_file(output / "best.pt", config.model, facts, best, {**info, "step": progress["best_step"]})
    history_text = (last.path / "history.jsonl").read_text()
    (output / "metrics.jsonl").write_text(history_text)
    for name in ("spm.model", "src.model", "tgt.model", "vocab.json"):
        if (tokenized / name).is_file():
            (output / name).write_bytes((tokenized / name).read_bytes())

    params = parameter_counts(model)
    train_rows = [row for row in map(json.loads, history_text.splitlines()) if "train_loss" in row]
    seconds = progress["seconds"]
    metrics = {
        # ``epoch``: the (0-based) epoch the last update was in.
        "steps": progress["step"], "epoch": progress["epoch"], "train_tokens": progress["train_tokens"],
        "train_flops": progress["train_flops"],
        "train_src_tokens": progress["train_src_tokens"],
        # Kaplan et al. (2020): 6 x non-embedding parameters x tokens (source + target).
        "train_flops_6nd": 6 * params["non_embedding"] * (progress["train_src_tokens"] + progress["train_tokens"]),
        "train_seconds": seconds, "device_hours": seconds * train.workers / 3600,
        "tokens_per_second": progress["train_tokens"] / max(seconds, 1e-9),
        "flops_per_second": progress["train_flops"] / max(seconds, 1e-9),
        "parameters": params["total"], "non_embedding_parameters": params["non_embedding"],
        "restarts": progress["restarts"], "attempt_seconds": seconds_this_attempt,
        "stop_reason": progress["stop_reason"],  # the budget that ended training
    }
    # Resolved precision, device and peak FLOP/s (with where the peak came from).
    hardware = progress.get("hardware", {})
    metrics.update({key: value for key, value in hardware.items() if key != "peak_flops_total"})
    if hardware.get("peak_flops_total"):
        metrics["mfu"] = metrics["flops_per_second"] / hardware["peak_flops_total"]
    if progress["best_valid_loss"] is not None:
        metrics["best_valid_loss"] = progress["best_valid_loss"]
        metrics["best_valid_ppl"] = math.exp(min(progress["best_valid_loss"], 50))
    if train_rows:
        metrics["final_train_loss"] = train_rows[-1]["train_loss"]
    report = {"model": config.model.model_dump(mode="json"), "stop_reason": progress["stop_reason"],
              "metrics": metrics, "checkpoints": [str(c.path.relative_to(output)) for c in checkpoints],
              "averaged_steps": info["averaged_steps"]}
    (output / "train_report.json").write_text(json.dumps(report, indent=2))
    return metrics

