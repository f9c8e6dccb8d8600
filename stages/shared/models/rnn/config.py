"""The attention RNN's hyperparameters and its named sizes (``tiny`` and ``small`` for a
CPU, ``base`` sized to Transformer base's parameters).

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stages.shared.models.widths import FRONTIER_WIDTHS


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

    def __post_init__(self):
        if self.hidden % 2:
            raise ValueError("rnn hidden must be even: each encoder direction is hidden / 2 wide")
        if self.tie_embeddings and self.embed_dim != (self.attentional_dim or self.hidden):
            raise ValueError(f"tie_embeddings needs the attentional vector as wide as the embeddings: set "
                             f"attentional_dim to embed_dim ({self.embed_dim}), it is "
                             f"{self.attentional_dim or self.hidden}")


PRESETS = {
    "tiny": RnnConfig(embed_dim=64, hidden=128, encoder_layers=1, decoder_layers=1),
    "small": RnnConfig(embed_dim=256, hidden=512, encoder_layers=2, decoder_layers=2),
    # Sized to Transformer base's parameter count (63M with a 37k joint vocabulary):
    # most of both are the 37k x 512 embedding and output matrices.
    "base": RnnConfig(embed_dim=512, hidden=512, encoder_layers=2, decoder_layers=2),
    # The compute frontier's sizes (a model's ``sizes:``): embeddings ``width`` wide, a
    # state twice that, one GRU layer a side, the attentional vector as wide as the
    # embeddings so that the output layer is the target embedding; 0.22M, 0.86M and 3.42M
    # parameters outside the embeddings. The width grows, as from Luong et al.'s 500 to
    # 1000 units. GRU: oneDNN has no bf16 LSTM on CPUs without native bf16.
    **{f"w{width}": RnnConfig(cell="gru", embed_dim=width, hidden=2 * width, encoder_layers=1, decoder_layers=1,
                              dropout=0.1, attentional_dim=width, tie_embeddings=True) for width in FRONTIER_WIDTHS},
}
