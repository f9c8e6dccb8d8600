"""What a train artifact says of its run, for other modules (the report, ``nmt report``,
``nmt run``): ``TrainSummary``, the record ``outputs.write_outputs`` writes (the
manifest's ``metrics`` and ``train_report.json``'s), and the curve in
``metrics.jsonl``. Torch-free, so that reading them does not import a trainer. The
weights are read through ``stages.shared.inference.model_file``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.records import keyed, load, optional

CURVE_FILE = "metrics.jsonl"  # every logged row: training, validation loss, validation BLEU
REPORT_FILE = "train_report.json"  # totals, costs and the resolved hardware


@dataclass(kw_only=True)
class TrainSummary:
    """A training run's totals, costs and hardware, its fields in the order written.
    Counts are of the whole run, a continued stable phase included (``continued_from``)."""

    steps: int
    epoch: int | None = optional()  # the (0-based) epoch the last update was in
    train_tokens: int
    train_flops: float  # counted, forward and backward (stages/shared/models/flops.py)
    train_src_tokens: int | None = optional()
    train_flops_6nd: float  # Kaplan et al. (2020)'s 6ND, side by side
    train_seconds: float
    device_hours: float  # train_seconds x workers
    tokens_per_second: float | None = optional()
    flops_per_second: float
    parameters: int
    non_embedding_parameters: int
    restarts: int | None = optional()
    attempt_seconds: float | None = optional()  # the stage's last attempt, start to end
    skipped_updates: int | None = optional()  # fp16 overflows
    stop_reason: str | None = optional()  # the budget that ended training
    # Where the training time went besides the updates (TrainingProgress.time_spent), and the updates.
    seconds_data: float | None = optional()
    seconds_validation: float | None = optional()
    seconds_checkpoints: float | None = optional()
    seconds_logging: float | None = optional()
    seconds_updates: float | None = optional()
    lr: float | None = optional()  # the rate its tune stage chose (lr_from)
    lr_from: str | None = optional()
    # A branched budget: the stage it continued, where, and what this stage computed itself.
    continued_from: str | None = optional()
    continued_at_step: int | None = optional()
    own_train_flops: float | None = optional()
    own_train_seconds: float | None = optional()
    # The resolved hardware (stages/train/worker_device.py), rank 0's device; written
    # as resolved, None included (a CPU has no compute capability).
    precision: str | None = None
    precision_reason: str | None = optional()  # how auto chose it, where it measured (precision_probe.py)
    device: str | None = None
    device_name: str | None = None
    device_capability: str | None = None
    threads_per_worker: int | None = None
    peak_flops_per_worker: float | None = None
    peak_source: str | None = None  # measured, datasheet or config
    peak_detail: str | None = None
    bleu_decode_precision: str | None = optional()  # the validation BLEU decodes' precision
    bleu_probe_seconds: dict[str, float] = keyed("bleu_probe_seconds_")  # what it was chosen on
    compiled_graphs: int | None = optional()  # train.compile
    mfu: float | None = optional()
    best_valid_loss: float | None = optional()
    best_valid_ppl: float | None = optional()
    best_valid_bleu: float | None = optional()
    best_step: int | None = optional()
    final_train_loss: float | None = optional()


def load_summary(metrics: dict, source: str) -> TrainSummary:
    """A train stage's ``metrics`` as a ``TrainSummary``; ``RecordError`` naming ``source``
    and the field if one is missing or unknown."""
    return load(TrainSummary, metrics, source)


def read_summary(artifact: Path) -> TrainSummary:
    return load_summary(json.loads((artifact / REPORT_FILE).read_text())["metrics"], str(artifact / REPORT_FILE))


def parse_curve(text: str) -> list[dict]:
    """The rows of a ``metrics.jsonl``, in the order they were logged."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_curve(artifact: Path) -> list[dict]:
    return parse_curve((artifact / CURVE_FILE).read_text())
