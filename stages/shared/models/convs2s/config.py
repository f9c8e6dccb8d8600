"""The convolutional sequence-to-sequence model's hyperparameters and its named sizes
(``tiny`` for a CPU, ``paper`` as Gehring et al. 2017 trained WMT'16 English-Romanian).

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from dataclasses import dataclass

from stages.shared.models.widths import FRONTIER_WIDTHS


@dataclass(frozen=True)
class ConvS2SConfig:
    """Gehring et al. (2017), "Convolutional Sequence to Sequence Learning" (arXiv 1705.03122)."""

    embed_dim: int = 512  # token and position embeddings; attention runs at this width
    hidden: int = 512  # channels of every convolution (each computes 2 x hidden for its GLU)
    encoder_layers: int = 20
    decoder_layers: int = 20
    kernel_size: int = 3  # odd: the encoder's window is centred on its position
    out_embed_dim: int = 512  # the decoder's projection before the output layer
    dropout: float = 0.2
    max_positions: int = 1024  # rows of each position table (source and target have their own)
    share_embeddings: bool = False  # output layer = the target embedding (needs out_embed_dim == embed_dim)

    def __post_init__(self):
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, so that the encoder's window is centred: it is "
                             f"{self.kernel_size}")
        if self.share_embeddings and self.out_embed_dim != self.embed_dim:
            raise ValueError(f"share_embeddings needs out_embed_dim equal to embed_dim ({self.embed_dim}), it is "
                             f"{self.out_embed_dim}")


PRESETS = {
    # As narrow as the other families' tiny presets (64 wide), four blocks a side so that
    # the encoder's window spans 9 tokens.
    "tiny": ConvS2SConfig(embed_dim=64, hidden=64, encoder_layers=4, decoder_layers=4, out_embed_dim=64,
                          dropout=0.1, share_embeddings=True),
    # Section 5.1 for WMT'16 English-Romanian: 20 layers in the encoder and in the decoder,
    # 512 hidden units, kernel width 3, embeddings of 512 (fairseq's fconv_wmt_en_ro).
    "paper": ConvS2SConfig(),
    # The compute frontier's sizes (a model's ``sizes:``): every width ``width`` at four
    # blocks a side (section 5.2 varies widths at a fixed depth too); 0.26M, 1.0M and 3.95M
    # parameters outside the embeddings.
    **{f"w{width}": ConvS2SConfig(embed_dim=width, hidden=width, out_embed_dim=width, encoder_layers=4,
                                  decoder_layers=4, dropout=0.1, share_embeddings=True) for width in FRONTIER_WIDTHS},
}
