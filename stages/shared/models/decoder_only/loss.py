"""The decoder-only model's training loss: L_MT on the target plus lambda_d * L_AE, a
language-model loss on the source tokens (Wang et al. 2021, section 3.2), with
lambda_d = ``ae_weight(step)``: 0 leaves L_MT alone."""

from __future__ import annotations

from torch import Tensor

from stages.shared.models.decoder_only.config import ae_weight
from stages.shared.models.decoder_only.model import DecoderOnlyTranslator
from stages.shared.models.cross_entropy import label_smoothed_cross_entropy


def reconstruction_loss(model: DecoderOnlyTranslator, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, step: int,
                        epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """(loss, target NLL), both summed."""
    weight = ae_weight(step, model.config)
    # Once L_AE weighs nothing, the source positions are not projected at all (their
    # logits were 21% of the default job's decoder-only FLOPs): its forward_flops counts
    # the same.
    src_logits, tgt_logits = model.forward_all(src, tgt_in, source_logits=weight > 0)
    loss, nll = label_smoothed_cross_entropy(tgt_logits, tgt_out, epsilon, pad_id)
    if weight > 0:
        loss = loss + weight * label_smoothed_cross_entropy(src_logits, src, epsilon, pad_id)[0]
    return loss, nll
