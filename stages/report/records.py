"""One comparable record per model, from a train and an evaluate stage's outputs.

The same four inputs exist in two places, so a record is built the same way from
either: artifacts in the store (``MANIFEST.json`` holds a stage's config and metrics,
``metrics.jsonl`` the training curve), or the files MLflow keeps for a tracked run
(``stage_report.json`` holds the same config and metrics, and ``metrics.jsonl`` is
logged beside it). The report stage reads artifacts; ``nmt report`` reads either.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from pipeline.core.artifacts import read_local_manifest
from pipeline.core.records import FieldAccess, load, optional, to_json
from stages.evaluate.artifact import EvalSummary, load_scores
from stages.train.artifact import TrainSummary, load_summary, read_curve


@dataclass(kw_only=True)
class RunRecord(FieldAccess):
    """One trained run's row of the report: report.json's ``models`` (its fields in this
    order), report.csv's columns (``FIELDS``), and what the comparison, tables and plots
    read. They read it by field name, as they read the comparison's dicts
    (``record["bleu"]``, ``record.get("seed")``); unlike a dict, a name that is not a
    field is an error, where a renamed field would have read as None and printed "-"."""

    name: str
    model: str | None = None  # the configured model it is a run of
    seed: int | None = None  # train.seed
    budget: float | None = None  # train.max_train_flops
    family: str | None = None
    preset: str | None = None
    parameters: int | None = None
    non_embedding_parameters: int | None = None
    steps: int | None = None
    stop_reason: str | None = None
    train_tokens: int | None = None
    train_seconds: float | None = None
    workers: int | None = None
    device_hours: float | None = None
    # Training costs three ways: counted, Kaplan's 6ND, and time x devices x peak.
    train_flops: float | None = None
    train_flops_6nd: float | None = None
    train_flops_paper: float | None = None
    flops_per_second: float | None = None
    mfu: float | None = None
    best_valid_ppl: float | None = None
    final_valid_loss: float | None = None  # the last validation's (the weights it ended with)
    best_valid_bleu: float | None = None
    bleu: float | None = None
    bleu_lc: float | None = None
    chrf: float | None = None
    greedy_bleu: float | None = None
    greedy_bleu_lc: float | None = None
    greedy_chrf: float | None = None
    beam_size: int | None = None
    # The translation gate (gate.py): its verdict, and what it reads.
    translates: str | None = None
    source_use: float | None = None
    source_use_error: float | None = None  # its standard error over the validation sentences
    top_output_share: float | None = None
    distinct_output_share: float | None = None
    sentences_per_second: float | None = None
    tokens_per_second: float | None = None
    decode_flops_per_sentence: float | None = None
    greedy_sentences_per_second: float | None = None
    # The same beam search run by CTranslate2 (evaluate.ctranslate2), where the family exports.
    ctranslate2_weights: str | None = None
    ctranslate2_bleu: float | None = None
    ctranslate2_sentences_per_second: float | None = None
    test_sentences: int | None = None
    sacrebleu_signature: str | None = None
    bleu_lc_signature: str | None = None
    chrf_signature: str | None = None
    precision: str | None = None
    device_name: str | None = None
    device_capability: str | None = None
    threads_per_worker: int | None = None
    peak_flops_per_worker: float | None = None
    peak_source: str | None = None
    peak_detail: str | None = None
    eval_precision: str | None = None
    eval_device_name: str | None = None
    # Not columns of the tables: how precision auto chose, the most frequent output line,
    # what says the run did not really train, and why the gate says it does not translate.
    precision_reason: str | None = optional()
    top_output: str | None = optional()
    training_warnings: list[str] = field(default_factory=list)
    gate_reasons: list[str] | None = optional()

    def to_json(self) -> dict:
        return to_json(self)


# The fields of report.json and report.csv, in column order: the record's but the last four.
FIELDS = tuple(spec.name for spec in fields(RunRecord))[:-4]


def load_record(row: dict, source: str) -> RunRecord:
    """A report.json row as a ``RunRecord``; ``RecordError`` naming ``source`` and the
    field if one is unknown."""
    return load(RunRecord, row, source)


def model_record(name: str, train_config: dict, train: TrainSummary, evaluation: EvalSummary | None,
                 run_of: str | None = None, final_valid_loss: float | None = None) -> RunRecord:
    """A trained run's row: training costs three ways, quality, and decoding speed.
    ``model`` is the configured model it is a run of (``run_of``, else its own name),
    ``seed`` and ``budget`` its train.seed and train.max_train_flops;
    ``final_valid_loss`` the loss of its last validation (the weights it ended with).

    ``train_flops_paper`` is the estimate of Vaswani et al. (2017), table 2: training
    time x devices x the device's peak FLOP/s, the peak the run used (measured, from a
    datasheet, or the config's override; ``peak_source`` says which). Runs made before
    peaks were measured fall back to the config's ``peak_flops_per_worker``, or None.
    """
    training, model = train_config["train"], train_config["model"]
    peak = train.peak_flops_per_worker or training.get("peak_flops_per_worker")
    peak_source = train.peak_source or ("config" if peak else None)
    beam = evaluation.beam if evaluation else None
    greedy = evaluation.greedy if evaluation else None
    ctranslate2 = evaluation.ctranslate2 if evaluation else None
    return RunRecord(**{
        "name": name, "model": run_of or name, "seed": training.get("seed"),
        "budget": training.get("max_train_flops"), "family": model["family"], "preset": model["preset"],
        "parameters": train.parameters, "non_embedding_parameters": train.non_embedding_parameters,
        "steps": train.steps, "stop_reason": train.stop_reason, "train_tokens": train.train_tokens,
        "train_seconds": train.train_seconds, "workers": training["workers"], "device_hours": train.device_hours,
        "train_flops": train.train_flops, "train_flops_6nd": train.train_flops_6nd,
        "train_flops_paper": train.train_seconds * training["workers"] * peak if peak else None,
        "flops_per_second": train.flops_per_second, "mfu": train.mfu,
        "best_valid_ppl": train.best_valid_ppl, "final_valid_loss": final_valid_loss,
        "best_valid_bleu": train.best_valid_bleu,
        "bleu": beam and beam.bleu, "bleu_lc": beam and beam.bleu_lc, "chrf": beam and beam.chrf,
        "greedy_bleu": greedy and greedy.bleu, "greedy_bleu_lc": greedy and greedy.bleu_lc,
        "greedy_chrf": greedy and greedy.chrf,
        "beam_size": evaluation and evaluation.beam_size,
        # The translation gate's inputs (stages/shared/gate.py); its verdict is given by
        # write_report, which can also measure collapse on outputs evaluated before it was.
        "translates": None, "source_use": evaluation and evaluation.source_use,
        "source_use_error": evaluation and evaluation.source_use_error,
        "top_output_share": evaluation and evaluation.top_output_share,
        "distinct_output_share": evaluation and evaluation.distinct_output_share,
        "sentences_per_second": beam and beam.sentences_per_second,
        "tokens_per_second": beam and beam.tokens_per_second,
        "decode_flops_per_sentence": evaluation and evaluation.decode_flops_per_sentence,
        "greedy_sentences_per_second": greedy and greedy.sentences_per_second,
        # The same beam search run by CTranslate2 (evaluate.ctranslate2), where the family exports.
        "ctranslate2_weights": evaluation and evaluation.ctranslate2_weights,
        "ctranslate2_bleu": ctranslate2 and ctranslate2.bleu,
        "ctranslate2_sentences_per_second": ctranslate2 and ctranslate2.sentences_per_second,
        "test_sentences": evaluation and evaluation.sentences,
        "sacrebleu_signature": beam and beam.bleu_signature,
        "bleu_lc_signature": beam and beam.bleu_lc_signature,
        "chrf_signature": beam and beam.chrf_signature,
        "precision": train.precision, "precision_reason": train.precision_reason, "device_name": train.device_name,
        "device_capability": train.device_capability, "threads_per_worker": train.threads_per_worker,
        "peak_flops_per_worker": peak, "peak_source": peak_source, "peak_detail": train.peak_detail,
        "eval_precision": evaluation and evaluation.precision,
        "eval_device_name": evaluation and evaluation.device_name,
    })


# What a validation point of the curve keeps: the loss every ``valid_every`` updates,
# BLEU and chrF (valid split and the training sample) every ``valid_bleu_every``.
CURVE_FIELDS = ("valid_loss", "valid_bleu", "valid_chrf", "train_bleu", "train_chrf")


def validation_curve(rows: list[dict]) -> list[dict]:
    """The validation points of a training curve against steps, FLOPs and seconds; a
    point holds the loss, the BLEU scores, or both."""
    return [{"step": row["step"], "train_flops": row["train_flops"], "train_seconds": row["train_seconds"],
             **{field: row[field] for field in CURVE_FIELDS if field in row}}
            for row in rows if any(field in row for field in CURVE_FIELDS)]


def from_artifacts(name: str, train_dir: Path, eval_dir: Path | None,
                   run_of: str | None = None) -> tuple[RunRecord, list[dict]]:
    """(record, validation curve) of a run from its train and evaluate artifacts."""
    return from_reports(name, read_local_manifest(train_dir), read_curve(train_dir),
                        read_local_manifest(eval_dir) if eval_dir else None, run_of,
                        train_source=str(train_dir), eval_source=str(eval_dir))


def from_reports(name: str, train_report: dict, train_curve: list[dict], eval_report: dict | None,
                 run_of: str | None = None, *, train_source: str, eval_source: str) -> tuple[RunRecord, list[dict]]:
    """The same from any dicts with a stage's ``config`` and ``metrics``: a manifest, or
    the ``stage_report.json`` MLflow keeps; ``train_source`` and ``eval_source`` name them
    in the error raised when their metrics lack a field or hold an unknown one."""
    curve = validation_curve(train_curve)
    losses = [point["valid_loss"] for point in curve if "valid_loss" in point]
    train = load_summary(train_report["metrics"], train_source)
    evaluation = load_scores(eval_report["metrics"], eval_source) if eval_report else None
    record = model_record(name, train_report["config"], train, evaluation, run_of, losses[-1] if losses else None)
    record.top_output = evaluation.top_output if evaluation else None
    record.training_warnings = training_warnings(name, train_report["config"]["train"], train, train_curve)
    return record, curve


# A run whose last logged training loss is above this share of its first did not learn.
STUCK_LOSS_RATIO = 0.95


def training_warnings(name: str, training: dict, train: TrainSummary, rows: list[dict]) -> list[str]:
    """What says a run did not really train: it ended inside its warmup (its rate never
    reached its peak), or its training loss never left where it started."""
    warnings = []
    warmup, steps = training.get("warmup_steps"), train.steps
    if training.get("warmup_fraction") is None and warmup and steps < warmup:
        warnings.append(f"{name} ended at update {steps:,}, inside its warmup of {warmup:,} updates: its learning "
                        "rate never reached its peak (lower train.warmup_steps, or set train.warmup_fraction)")
    logged = [row for row in rows if row.get("train_loss") is not None]
    if len(logged) >= 2 and logged[-1]["train_loss"] > STUCK_LOSS_RATIO * logged[0]["train_loss"]:
        first, last = logged[0], logged[-1]
        warnings.append(f"{name}'s training loss did not fall: {first['train_loss']:.2f} at update {first['step']:,}, "
                        f"{last['train_loss']:.2f} at update {last['step']:,}")
    return warnings
