"""The training loss of any family: the label-smoothed cross-entropy of the target
(``cross_entropy.py``), or the family's own loss where it trains on more."""

from __future__ import annotations

from torch import Tensor

from stages.shared.models.cross_entropy import label_smoothed_cross_entropy
from stages.shared.models.families import family_of
from stages.shared.models.protocol import TranslationModel


def translation_loss(model: TranslationModel, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, step: int = 0,
                     epsilon: float = 0.1, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """The training loss of any family, and the target NLL it reports (both summed):
    the label-smoothed cross-entropy of the target, or the family's own loss where it
    trains on more (``ModelFamily.loss``: the decoder-only model's source reconstruction)."""
    loss = family_of(model).loss
    if loss is not None:
        return loss(model, src, tgt_in, tgt_out, step, epsilon, pad_id)
    return label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, epsilon, pad_id)
