"""Experiment configuration: one YAML file per experiment, validated on load.

Every section is a pydantic model with ``extra="forbid"``, so a typo is an error,
not a silently ignored key. ``load_config`` turns every validation problem into one
``ConfigError`` that names the file, the line, the dotted key, and the valid keys or
the closest match. Relative paths in the file are resolved against the file's own
directory, so a config works from any working directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.config_errors import describe_problems


class ConfigError(Exception):
    """A config file or override that cannot be used; the message says where and why."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- download


class FileRef(Section):
    """One input file: a local path, or a URL pinned by sha256.

    ``member`` selects one file inside an archive (tar, tar.gz, zip) at that path/URL.
    """

    path: str | None = None
    url: str | None = None
    sha256: str | None = None
    member: str | None = None

    @field_validator("path")
    @classmethod
    def _resolve_against_config_dir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = (info.context or {}).get("base_dir")
        path = Path(os.path.expanduser(value))
        return str(path if path.is_absolute() or base is None else (Path(base) / path).resolve())

    @field_validator("sha256")
    @classmethod
    def _is_hex_digest(cls, value: str | None) -> str | None:
        if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
            raise ValueError("must be a 64-character lowercase hex sha256 digest")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> FileRef:
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of 'path' or 'url'")
        if self.url is not None and self.sha256 is None:
            raise ValueError("a 'url' needs its 'sha256' so the download can be verified")
        return self

    @property
    def filename(self) -> str:
        """The name mirrors are searched for: the last component of the URL or path."""
        location = self.url if self.url is not None else self.path
        return location.rstrip("/").rsplit("/", 1)[-1]


class FilesSource(Section):
    """Two files, source and target language, one sentence per line (plain or gzip).

    ``alignment: document`` means blank lines separate documents and sentences inside
    a document are not yet paired; the clean stage sentence-aligns them (Gale-Church).
    """

    type: Literal["files"]
    src: FileRef
    tgt: FileRef
    alignment: Literal["line", "document"] = "line"
    max_pairs: int | None = Field(default=None, gt=0)


class TsvSource(Section):
    """One tab-separated file (plain or gzip) holding both sides."""

    type: Literal["tsv"]
    file: FileRef
    src_column: int = Field(default=0, ge=0)
    tgt_column: int = Field(default=1, ge=0)
    max_pairs: int | None = Field(default=None, gt=0)


class HuggingFaceSource(Section):
    """A Hugging Face dataset: a hub id or a local dataset directory.

    Rows are either ``{"translation": {src_lang: ..., tgt_lang: ...}}`` (the WMT layout)
    or flat, with ``src_field`` / ``tgt_field`` naming the columns.
    """

    type: Literal["huggingface"]
    dataset: str
    config: str | None = None
    split: str = "train"
    streaming: bool = False
    src_field: str | None = None
    tgt_field: str | None = None
    max_pairs: int | None = Field(default=None, gt=0)


class SacrebleuSource(Section):
    """A sacreBLEU test set by name, e.g. ``wmt14`` (langpair defaults to src-tgt)."""

    type: Literal["sacrebleu"]
    test_set: str
    langpair: str | None = None
    max_pairs: int | None = Field(default=None, gt=0)


# Every source type, once: the ``Source`` union and the error messages derive from it.
SOURCE_TYPES = (FilesSource, TsvSource, HuggingFaceSource, SacrebleuSource)
Source = Annotated[Union[SOURCE_TYPES], Field(discriminator="type")]


class DownloadConfig(Section):
    src_lang: str
    tgt_lang: str
    train: Source
    valid: Source
    test: Source


# --------------------------------------------------------------------------- clean


class CleanConfig(Section):
    """Filters for the training split; valid and test are only normalized.

    Defaults follow Moses' clean-corpus-n.perl (1-80 words, ratio 9) loosened to
    250 words, the usual setting for subword-level NMT.
    """

    unicode_form: Literal["NFC", "NFKC", "none"] = "NFC"
    min_words: int = Field(default=1, ge=0)
    max_words: int = Field(default=250, gt=0)
    max_chars: int = Field(default=2000, gt=0)
    max_length_ratio: float = Field(default=9.0, gt=1.0)
    drop_duplicates: bool = True
    drop_identical: bool = True
    langid: bool = False
    langid_min_chars: int = Field(default=20, ge=0)


# --------------------------------------------------------------------------- bpe


class BpeConfig(Section):
    vocab_size: int = Field(default=8000, gt=10)
    joint: bool = True
    character_coverage: float = Field(default=1.0, gt=0.0, le=1.0)
    input_sentence_size: int = Field(default=2_000_000, gt=0)
    language_tags: bool = True
    user_symbols: list[str] = []
    seed: int = 1
    threads: int = Field(default=2, gt=0)


# --------------------------------------------------------------------------- tokenize


class TokenizeConfig(Section):
    shards: int = Field(default=4, gt=0)
    append_eos: bool = True
    histogram_bin_width: int = Field(default=8, gt=0)


# --------------------------------------------------------------------------- train


class TrainConfig(Section):
    """How every model is trained: one section, so the comparison is like for like.

    Defaults follow Vaswani et al. (2017), section 5: Adam (0.9, 0.98, 1e-9), the
    inverse-square-root schedule with 4000 warmup steps, label smoothing 0.1. A run
    stops at the first budget it reaches; at least one must be set.
    """

    # Ray Train workers, each with one DeepSpeed engine (data parallel).
    workers: int = Field(default=1, gt=0)
    use_gpu: bool = False
    cpus_per_worker: int = Field(default=1, gt=0)
    # torch threads per worker, at most cpus_per_worker (more would oversubscribe the
    # CPUs Ray gave the worker); default: cpus_per_worker.
    threads_per_worker: int | None = Field(default=None, gt=0)
    # auto: what the worker's device runs fast (pipeline/hardware.py): bf16 on GPUs that
    # have it and on CPUs with AMX or AVX512-BF16, fp16 on older GPUs, else fp32.
    # bf16 is autocast on a CPU and DeepSpeed's bf16 mode on a GPU; fp16 is GPU only.
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    zero_stage: int = Field(default=0, ge=0, le=3)
    # Tokens per batch and side on each worker (padded: sentences x longest); the paper
    # used about 25,000 per side over 8 GPUs.
    max_tokens: int = Field(default=4096, gt=0)
    gradient_accumulation: int = Field(default=1, gt=0)
    gradient_clipping: float = Field(default=0.0, ge=0.0)  # 0: none, as in the paper
    label_smoothing: float = Field(default=0.1, ge=0.0, lt=1.0)

    optimizer: Literal["adam", "adamw"] = "adam"
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = Field(default=1e-9, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    # noam: lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3);
    # cosine: linear warmup to lr, cosine decay to min_lr at max_steps.
    schedule: Literal["noam", "cosine"] = "noam"
    lr: float = Field(default=5e-4, gt=0.0)
    lr_scale: float = Field(default=1.0, gt=0.0)
    min_lr: float = Field(default=0.0, ge=0.0)
    warmup_steps: int = Field(default=4000, ge=0)

    # Budgets: whichever comes first.
    max_steps: int | None = Field(default=None, gt=0)
    max_epochs: int | None = Field(default=None, gt=0)
    max_train_tokens: int | None = Field(default=None, gt=0)  # target tokens, all workers
    max_train_flops: float | None = Field(default=None, gt=0)  # counted, stages/train/flops.py
    max_wall_time: float | None = Field(default=None, gt=0)  # seconds of training

    valid_every: int = Field(default=1000, gt=0)  # steps
    early_stopping_patience: int | None = Field(default=None, gt=0)  # validations without improvement
    checkpoint_every: int = Field(default=1000, gt=0)  # steps
    keep_checkpoints: int = Field(default=5, gt=0)
    # The final model averages the last N checkpoints (the paper averaged 5, section 6.1).
    average_last: int = Field(default=1, gt=0)
    log_every: int = Field(default=10, gt=0)  # steps between logged metrics
    seed: int = 1
    # Peak FLOP/s of one worker's device, for MFU and the "time x peak" FLOPs. Default:
    # the datasheet of a known GPU, else measured by a matmul probe on each worker
    # (pipeline/peak_flops.py); set it only to override those.
    peak_flops_per_worker: float | None = Field(default=None, gt=0)
    # Ray Train restarts crashed workers from the last checkpoint this many times.
    max_failures: int = Field(default=2, ge=-1)
    # Merged into the generated DeepSpeed JSON last (e.g. zero_optimization.offload_optimizer).
    deepspeed: dict[str, Any] = {}

    @model_validator(mode="after")
    def _has_a_budget_and_a_schedule(self) -> TrainConfig:
        budgets = (self.max_steps, self.max_epochs, self.max_train_tokens, self.max_train_flops, self.max_wall_time)
        if all(budget is None for budget in budgets):
            raise ValueError("set at least one budget: max_steps, max_epochs, max_train_tokens, "
                             "max_train_flops or max_wall_time")
        if self.schedule == "cosine" and self.max_steps is None:
            raise ValueError("schedule 'cosine' decays to max_steps: set max_steps")
        if self.average_last > self.keep_checkpoints:
            raise ValueError("average_last cannot exceed keep_checkpoints")
        if self.precision == "fp16" and not self.use_gpu:
            raise ValueError("precision fp16 needs use_gpu: true; on a CPU use auto, bf16 or fp32")
        if self.threads_per_worker is not None and self.threads_per_worker > self.cpus_per_worker:
            raise ValueError(f"threads_per_worker ({self.threads_per_worker}) exceeds cpus_per_worker "
                             f"({self.cpus_per_worker}): the threads would oversubscribe the CPUs Ray gives "
                             "each worker")
        return self


# --------------------------------------------------------------------------- models


class ModelSpec(Section):
    """One model to train and compare: a family, a named preset, and settings that
    override the preset's hyperparameters (see stages/train/models/presets.py).
    ``train`` overrides keys of the experiment's train section for this model only
    (e.g. a learning rate); budgets are best left shared."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    family: Literal["transformer", "rnn", "decoder_only"]
    preset: str = "small"
    settings: dict[str, Any] = {}
    train: dict[str, Any] = {}

    @model_validator(mode="after")
    def _preset_and_settings_exist(self) -> ModelSpec:
        from stages.train.models.presets import resolve_preset  # torch-free

        resolve_preset(self.family, self.preset, self.settings)
        return self


class TrainStageConfig(Section):
    """A train stage's slice: its model and the train section with the model's overrides."""

    model: ModelSpec
    train: TrainConfig


# --------------------------------------------------------------------------- evaluate


class EvaluateConfig(Section):
    """Beam search on the test split, scored with sacreBLEU; one section for every model.

    Defaults are Vaswani et al. (2017), section 6.1: beam 4, length penalty alpha 0.6,
    at most source length + 50 tokens (``max_length_a * |x| + max_length_b``).
    """

    split: Literal["test", "valid"] = "test"
    # model: the train stage's final (averaged) weights; best: its best validated ones.
    weights: Literal["model", "best"] = "model"
    beam_size: int = Field(default=4, gt=0)
    length_penalty: float = Field(default=0.6, ge=0.0)
    max_length_a: float = Field(default=1.0, ge=0.0)
    max_length_b: int = Field(default=50, gt=0)
    min_length: int = Field(default=1, ge=0)  # tokens before EOS may end a hypothesis
    nbest: int = Field(default=1, gt=0)  # hypotheses per sentence in nbest.jsonl
    greedy: bool = True  # also decode with beam 1, for the report's greedy columns
    batch_size: int = Field(default=64, gt=0)  # sentences per decoding batch
    shards: int = Field(default=2, gt=0)  # parallel tasks the split is cut into, one CPU each
    # auto: resolved on each decoding task's device, as train.precision is; bf16 and fp16
    # are autocast.
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    device: Literal["cpu", "cuda"] = "cpu"  # cuda: each decoding task holds one GPU

    @model_validator(mode="after")
    def _nbest_within_beam(self) -> EvaluateConfig:
        if self.nbest > self.beam_size:
            raise ValueError(f"nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})")
        if self.precision == "fp16" and self.device != "cuda":
            raise ValueError("precision fp16 needs device: cuda; on a CPU use auto, bf16 or fp32")
        return self


class EvaluateStageConfig(Section):
    """An evaluate stage's slice: which trained model, and how to search and score."""

    model: str
    evaluate: EvaluateConfig


class ReportStageConfig(Section):
    """The report stage's slice: the experiment and its models, in config order."""

    experiment: str
    models: list[str]


# --------------------------------------------------------------------------- experiment


class ExperimentConfig(Section):
    name: str
    artifact_root: str = "artifacts"
    mirrors: list[str] = []
    download: DownloadConfig
    clean: CleanConfig = CleanConfig()
    bpe: BpeConfig = BpeConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    train: TrainConfig | None = None
    evaluate: EvaluateConfig = EvaluateConfig()
    models: list[ModelSpec] = []

    @model_validator(mode="after")
    def _models_need_a_train_section(self) -> ExperimentConfig:
        if self.models and self.train is None:
            raise ValueError("'models' are listed but there is no 'train' section with a budget")
        for model in self.models:
            try:
                self.train_stage_config(model)
            except ValidationError as error:
                problem = error.errors()[0]
                where = ".".join(str(part) for part in problem["loc"])
                raise ValueError(f"model {model.name!r}: train.{where}: {problem['msg']}") from None
        return self

    def train_stage_config(self, model: ModelSpec) -> TrainStageConfig:
        train = TrainConfig.model_validate({**self.train.model_dump(), **model.train})
        return TrainStageConfig(model=model, train=train)

    def evaluate_stage_config(self, model: ModelSpec) -> EvaluateStageConfig:
        return EvaluateStageConfig(model=model.name, evaluate=self.evaluate)

    def report_stage_config(self) -> ReportStageConfig:
        return ReportStageConfig(experiment=self.name, models=[model.name for model in self.models])

    @field_validator("models")
    @classmethod
    def _unique_model_names(cls, value: list[ModelSpec]) -> list[ModelSpec]:
        names = [model.name for model in value]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique; repeated: {', '.join(duplicates)}")
        return value

    @field_validator("mirrors")
    @classmethod
    def _resolve_mirrors(cls, value: list[str], info: ValidationInfo) -> list[str]:
        base = (info.context or {}).get("base_dir")
        resolved = []
        for entry in value:
            path = Path(os.path.expanduser(entry))
            resolved.append(str(path if path.is_absolute() or base is None else (Path(base) / path).resolve()))
        return resolved


# --------------------------------------------------------------------------- loading


def load_config(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """Read, override and validate an experiment file; raise ConfigError on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    for override in overrides:
        _apply_override(raw, override)
    try:
        return ExperimentConfig.model_validate(raw, context={"base_dir": path.parent.resolve()})
    except ValidationError as error:
        problems = describe_problems(error, text, overrides, ExperimentConfig, SOURCE_TYPES)
        raise ConfigError(f"{path}: invalid config\n{problems}") from None


def _apply_override(raw: dict, override: str) -> None:
    """Apply ``a.b.c=value``; the value is parsed as YAML so numbers and booleans work."""
    if "=" not in override:
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE, e.g. tokenize.shards=8")
    dotted, value = override.split("=", 1)
    keys = dotted.strip().split(".")
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {override!r}: '{key}' is not a section")
        node = child
    node[keys[-1]] = yaml.safe_load(value)
