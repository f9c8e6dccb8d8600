"""What the train stage leaves beside its DeepSpeed checkpoints once training ends:
``model.pt`` (fp32, the average of the last ``average_last`` checkpoints,
``checkpointer.final_weights``) and
``best.pt`` (the best validated weights), both loadable without DeepSpeed by
``model_file.load_model_file``; ``metrics.jsonl`` (the logged curve); the vocabulary
and SentencePiece model(s), so the artifact translates on its own; and
``train_report.json`` (totals, costs and the resolved hardware)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pipeline.core.records import to_json
from stages.bpe import read_vocab
from stages.shared.inference.model_file import (
    build_for_vocabulary,
    save_model_file,
    vocabulary_facts,
    weights_file,
)
from stages.train import checkpointer, plan
from stages.train.artifact import TrainSummary
from stages.train.config import TrainStageConfig
from stages.shared.models.flops import parameter_counts, six_nd

# The parts of a run's training time besides its updates (TrainingProgress.time_spent).
TIME_PARTS = ("data", "validation", "checkpoints", "logging")


def write_outputs(output: Path, config: TrainStageConfig, lr: float, tokenized: Path, checkpoints: list,
                   seconds_this_attempt: float) -> dict:
    """``lr``: the run's peak rate (train.lr, or the one its tune stage chose)."""
    training = config.train
    last = checkpoints[-1]
    vocab = read_vocab(tokenized)
    facts = vocabulary_facts(tokenized, vocab)
    model = build_for_vocabulary(config.model, facts)
    # A checkpoint written on SIGTERM (preemption.py) is off the schedule: never averaged.
    averaged_steps = plan.averaged([c.step for c in checkpoints if not c.progress.get("preempted")], training)
    weights = checkpointer.final_weights(checkpoints, averaged_steps, training.zero_stage, model)
    progress = last.progress
    info = {"step": progress["step"], "averaged_steps": averaged_steps,
            "best_step": progress["best_step"], "best_metric": training.best_metric,
            "best_valid_loss": progress["best_valid_loss"], "best_valid_bleu": progress.get("best_valid_bleu")}
    save_model_file(weights_file(output), config.model, facts, weights, info)
    best = checkpointer.saved_best(last)
    if best is not None:
        save_model_file(weights_file(output, "best"), config.model, facts, best,
                        {**info, "step": progress["best_step"]})
    history_text = checkpointer.saved_history(last)
    (output / "metrics.jsonl").write_text(history_text)
    for name in ("spm.model", "src.model", "tgt.model", "vocab.json"):
        if (tokenized / name).is_file():
            (output / name).write_bytes((tokenized / name).read_bytes())

    params = parameter_counts(model)
    train_rows = [row for row in map(json.loads, history_text.splitlines()) if "train_loss" in row]
    seconds = progress["seconds"]
    # Where the training time went: the loop's parts besides the updates (the final
    # validation and checkpoint included), and the updates themselves.
    spent = progress.get("time_spent") or {}
    continued = progress.get("continued") or {}  # a branched budget: the stable phase it continued
    hardware = dict(progress.get("hardware", {}))  # resolved precision, device and peak FLOP/s
    peak_total = hardware.pop("peak_flops_total", None)
    probes = {key[len("bleu_probe_seconds_"):]: hardware.pop(key) for key in list(hardware)
              if key.startswith("bleu_probe_seconds_")}
    best_loss, best_bleu = progress["best_valid_loss"], progress.get("best_valid_bleu")
    summary = TrainSummary(
        steps=progress["step"], epoch=progress["epoch"], train_tokens=progress["train_tokens"],
        train_flops=progress["train_flops"], train_src_tokens=progress["train_src_tokens"],
        train_flops_6nd=six_nd(model, progress["train_src_tokens"], progress["train_tokens"]),
        train_seconds=seconds, device_hours=seconds * training.workers / 3600,
        tokens_per_second=progress["train_tokens"] / max(seconds, 1e-9),
        flops_per_second=progress["train_flops"] / max(seconds, 1e-9),
        parameters=params["total"], non_embedding_parameters=params["non_embedding"],
        restarts=progress["restarts"], attempt_seconds=seconds_this_attempt,
        skipped_updates=progress.get("skipped_updates", 0), stop_reason=progress["stop_reason"],
        **{f"seconds_{part}": spent.get(part, 0.0) for part in TIME_PARTS},
        seconds_updates=max(0.0, seconds - progress.get("time_spent_in_seconds", 0.0)),
        lr=lr if config.lr_from is not None else None, lr_from=config.lr_from,
        continued_from=continued.get("stage"), continued_at_step=continued.get("step"),
        own_train_flops=progress["train_flops"] - continued["train_flops"] if continued else None,
        own_train_seconds=seconds - continued["seconds"] if continued else None,
        **hardware, bleu_probe_seconds=probes,
        mfu=progress["train_flops"] / max(seconds, 1e-9) / peak_total if peak_total else None,
        best_valid_loss=best_loss, best_valid_ppl=math.exp(min(best_loss, 50)) if best_loss is not None else None,
        best_valid_bleu=best_bleu, best_step=progress["best_step"] if best_bleu is not None else None,
        final_train_loss=train_rows[-1]["train_loss"] if train_rows else None)
    metrics = to_json(summary)
    report = {"model": config.model.model_dump(mode="json"), "stop_reason": progress["stop_reason"],
              "metrics": metrics, "checkpoints": [str(c.path.relative_to(output)) for c in checkpoints],
              "averaged_steps": info["averaged_steps"]}
    (output / "train_report.json").write_text(json.dumps(report, indent=2))
    return metrics

