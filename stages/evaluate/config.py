"""The evaluate stage's config: how to search (``SearchSettings``, shared with ``nmt
translate`` and the service) and what to decode and score, shared by every model."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from pipeline.core.section import Section
from stages.shared.export import QUANTIZATIONS
from stages.shared.inference.search import SearchSettings


class EvaluateConfig(SearchSettings):
    """Beam search on the test split, scored with sacreBLEU; one section for every model.
    ``nbest`` is how many hypotheses per sentence ``nbest.jsonl`` keeps; ``device: cuda``
    gives each decoding task one GPU."""

    split: Literal["test", "valid"] = "test"  # the split decoded and scored
    # model: the train stage's final (averaged) weights; best: its best validated ones.
    weights: Literal["model", "best"] = "model"
    greedy: bool = True  # also decode with beam 1, for the report's greedy columns
    batch_size: int = Field(default=64, gt=0)  # sentences per decoding batch
    shards: int = Field(default=2, gt=0)  # parallel tasks the split is cut into, one CPU each
    # Also decode with the model exported to CTranslate2 with these weights (int8: the
    # deployed kind), same search, same threads: its BLEU and speed beside ours. Families
    # CTranslate2 cannot run (rnn; decoder_only with prefix_attention) are skipped, and
    # scores.json says why.
    ctranslate2: Optional[Literal[QUANTIZATIONS]] = None


class EvaluateStageConfig(Section):
    """An evaluate stage's slice: which trained model, and how to search and score."""

    model: str
    evaluate: EvaluateConfig
