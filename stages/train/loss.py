"""Label-smoothed cross-entropy (Szegedy et al. 2016; Vaswani et al. 2017, section 5.4,
epsilon_ls = 0.1), summed over non-padding target tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, epsilon: float = 0.1,
                                 pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """(smoothed loss, plain NLL), each summed over tokens whose target is not padding.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon
    uniformly over the whole vocabulary (fairseq's formulation).
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)
    keep = target != pad_id
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()


def translation_loss(model, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, step: int = 0,
                     epsilon: float = 0.1, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """The training loss of any family, and the target NLL it reports (both summed).

    Decoder-only models add lambda_d * L_AE, a language-model loss on the source tokens
    (Wang et al. 2021, section 3.2); lambda_d = ae_weight(step) and is 0 for L_MT alone.
    """
    from stages.train.models.decoder_only import DecoderOnlyTranslator, ae_weight

    if not isinstance(model, DecoderOnlyTranslator):
        return label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, epsilon, pad_id)
    src_logits, tgt_logits = model.forward_all(src, tgt_in)
    loss, nll = label_smoothed_cross_entropy(tgt_logits, tgt_out, epsilon, pad_id)
    weight = ae_weight(step, model.config)
    if weight > 0:
        loss = loss + weight * label_smoothed_cross_entropy(src_logits, src, epsilon, pad_id)[0]
    return loss, nll
