"""Hyperparameters of each model family and their named presets.

Kept free of torch so that configs validate without importing it. Presets named in
the papers use the papers' values; ``tiny`` and ``small`` are sized for a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal


@dataclass(frozen=True)
class TransformerConfig:
    """Vaswani et al. (2017), "Attention is all you need", table 3."""

    d_model: int = 512
    heads: int = 8
    ff_dim: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1  # residual and embedding dropout (section 5.4)
    attention_dropout: float = 0.0  # on the attention weights: not in the paper; turns off SDPA's fused kernels
    pre_norm: bool = False  # the paper is post-LN; pre-LN (with a final LayerNorm) trains more stably
    learned_positions: bool = False
    share_embeddings: bool = True  # source, target and output: needs a joint vocabulary (section 3.4)
    max_positions: int = 1024


@dataclass(frozen=True)
class RnnConfig:
    """Attention encoder-decoder: Bahdanau et al. (2015) / Luong et al. (2015)."""

    cell: Literal["lstm", "gru"] = "lstm"
    embed_dim: int = 512
    hidden: int = 1024  # decoder state size; each encoder direction has hidden // 2
    encoder_layers: int = 2
    decoder_layers: int = 2
    attention: Literal["additive", "general", "dot"] = "additive"
    dropout: float = 0.2
    # Width of the attentional vector h~_t that feeds the output layer and the next step;
    # 0 means ``hidden``. Setting it to embed_dim is nmtpytorch's hid2out bottleneck, which
    # lets the output layer share the target embedding and halves its cost at hidden = 2 x embed.
    attentional_dim: int = 0
    tie_embeddings: bool = False  # decoder input and output embeddings (needs the attentional vector embed_dim wide)


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


TRANSFORMER_PRESETS = {
    "tiny": TransformerConfig(d_model=64, heads=4, ff_dim=128, encoder_layers=2, decoder_layers=2, dropout=0.1),
    "small": TransformerConfig(d_model=256, heads=4, ff_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.1),
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, heads=16, ff_dim=4096, dropout=0.3),
}
RNN_PRESETS = {
    "tiny": RnnConfig(embed_dim=64, hidden=128, encoder_layers=1, decoder_layers=1),
    "small": RnnConfig(embed_dim=256, hidden=512, encoder_layers=2, decoder_layers=2),
    # Sized to Transformer base's parameter count (63M with a 37k joint vocabulary):
    # most of both are the 37k x 512 embedding and output matrices.
    "base": RnnConfig(embed_dim=512, hidden=512, encoder_layers=2, decoder_layers=2),
}
DECODER_ONLY_PRESETS = {
    "tiny": DecoderOnlyConfig(d_model=64, heads=4, ff_dim=128, layers=4),
    "small": DecoderOnlyConfig(d_model=256, heads=4, ff_dim=1024, layers=6),
    # 14 layers match Transformer base's parameter count (63M with a 37k joint vocabulary).
    "base": DecoderOnlyConfig(layers=14),
}
PRESETS = {"transformer": TRANSFORMER_PRESETS, "rnn": RNN_PRESETS, "decoder_only": DECODER_ONLY_PRESETS}


def resolve_preset(family: str, preset: str, overrides: dict) -> TransformerConfig | RnnConfig | DecoderOnlyConfig:
    """The preset's config with ``overrides`` applied; ValueError names a bad preset or key."""
    presets = PRESETS[family]
    if preset not in presets:
        raise ValueError(f"unknown {family} preset {preset!r}; presets are: {', '.join(presets)}")
    base = presets[preset]
    valid = {field.name for field in fields(base)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(f"unknown {family} setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    return replace(base, **overrides)
