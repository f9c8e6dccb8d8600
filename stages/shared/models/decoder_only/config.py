"""The decoder-only translator's hyperparameters and its named sizes (``tiny`` and
``small`` for a CPU, ``base`` sized to Transformer base's parameters).

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from dataclasses import dataclass

from stages.shared.models.widths import FRONTIER_WIDTHS


@dataclass(frozen=True)
class DecoderOnlyConfig:
    """Wang et al. (2021), "Language models are good translators": one causal stack over
    ``<src-lang> source <tgt-lang> target``; pre-LN, GELU, final LayerNorm."""

    d_model: int = 512
    heads: int = 8
    ff_dim: int = 2048
    layers: int = 12
    dropout: float = 0.1
    attention_dropout: float = 0.0
    prefix_attention: bool = False  # source tokens attend to the whole source (a prefix LM)
    learned_positions: bool = False
    max_positions: int = 1024
    # Loss = lambda_d * L_AE (source tokens) + L_MT (target tokens), lambda_d decaying
    # piecewise-linearly from 1 at step 0 to alpha at step B, then 0 (paper, section 3.2).
    ae_loss: bool = True
    ae_alpha: float = 0.01
    ae_steps: int = 10_000
    # Or B as a share of the run's planned updates (stages/train/plan.py turns it into
    # ae_steps before the model is built), so that every budget ends L_AE within its run.
    ae_fraction: float | None = None

    def __post_init__(self):
        if self.ae_fraction is not None and not 0 < self.ae_fraction <= 1:
            raise ValueError(f"ae_fraction must be in (0, 1], got {self.ae_fraction}")


def ae_weight(step: int, config: DecoderOnlyConfig) -> float:
    """lambda_d: 1 at step 0, linearly down to alpha at step B, then 0 (section 3.2)."""
    if not config.ae_loss or config.prefix_attention or step >= config.ae_steps:
        return 0.0
    return 1.0 - (1.0 - config.ae_alpha) * step / config.ae_steps


PRESETS = {
    "tiny": DecoderOnlyConfig(d_model=64, heads=4, ff_dim=128, layers=4),
    "small": DecoderOnlyConfig(d_model=256, heads=4, ff_dim=1024, layers=6),
    # 14 layers match Transformer base's parameter count (63M with a 37k joint vocabulary).
    "base": DecoderOnlyConfig(layers=14),
    # The compute frontier's sizes (a model's ``sizes:``): the width doubles at a fixed
    # depth of 10 layers, which holds as many parameters as the Transformer's 4 + 4 at
    # each width (0.34M, 1.33M and 5.27M outside the embeddings).
    **{f"w{width}": DecoderOnlyConfig(d_model=width, heads=max(1, width // 32), ff_dim=2 * width, layers=10,
                                      dropout=0.1) for width in FRONTIER_WIDTHS},
}
