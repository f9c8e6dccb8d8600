"""The evaluate stage's config: how to search and score, shared by every model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipeline.section import Section


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
