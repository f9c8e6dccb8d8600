"""The Transformer's hyperparameters and its named sizes: the paper's base and big, and
``tiny`` and ``small`` sized for a CPU.

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from dataclasses import dataclass

from stages.shared.models.widths import FRONTIER_WIDTHS


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



def check_vocabularies(config: TransformerConfig, src_vocab: int, tgt_vocab: int) -> None:
    """Shared embeddings are one table: ValueError unless both sides have one vocabulary."""
    if config.share_embeddings and src_vocab != tgt_vocab:
        raise ValueError("share_embeddings needs a joint vocabulary (bpe.joint: true)")

PRESETS = {
    "tiny": TransformerConfig(d_model=64, heads=4, ff_dim=128, encoder_layers=2, decoder_layers=2, dropout=0.1),
    "small": TransformerConfig(d_model=256, heads=4, ff_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.1),
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, heads=16, ff_dim=4096, dropout=0.3),
    # The compute frontier's sizes (a model's ``sizes:``): the width doubles from one to
    # the next at a fixed depth, with 32-wide heads, as base grows into big (table 3).
    # 0.34M, 1.33M and 5.27M parameters outside the embeddings. ff_dim is 2 x d_model,
    # not the paper's 4 x, which trained better on Multi30k (docs/models.md).
    **{f"w{width}": TransformerConfig(d_model=width, heads=max(1, width // 32), ff_dim=2 * width, encoder_layers=4,
                                      decoder_layers=4, dropout=0.1) for width in FRONTIER_WIDTHS},
}
