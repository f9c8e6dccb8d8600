"""Label-smoothed cross-entropy (Szegedy et al. 2016; Vaswani et al. 2017, section 5.4,
epsilon_ls = 0.1), summed over non-padding target tokens: the loss every family trains
with (``loss.py``), alone or inside its own."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, epsilon: float = 0.1,
                                 pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """(smoothed loss, plain NLL), each summed over tokens whose target is not padding.

    The smoothed target puts 1 - epsilon on the reference token and spreads epsilon
    uniformly over the whole vocabulary (fairseq's formulation). Computed in fp32
    whatever the logits' precision.
    """
    return _LabelSmoothedCrossEntropy.apply(logits, target, epsilon, pad_id)


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """The loss with a hand-written backward. The logits are the largest tensor of a
    training step (tokens x vocabulary), and autograd's backward through log_softmax,
    gather and mean writes three tensors of that size and adds them up. Their sum is
    known in closed form: d loss / d logits = softmax - (1 - eps) onehot - eps / V
    (and softmax - onehot for the NLL), so the backward is one exp, one fused
    multiply-subtract and a scatter."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        # fp32 at least: bf16 and fp16 logits are promoted, fp64 ones (gradcheck) kept.
        log_probs = F.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        keep = (target != pad_id).unsqueeze(-1)
        nll = -log_probs.gather(-1, target.unsqueeze(-1))
        uniform = -log_probs.mean(dim=-1, keepdim=True)
        loss = (1.0 - epsilon) * nll + epsilon * uniform
        ctx.save_for_backward(log_probs, target, keep)
        ctx.epsilon, ctx.dtype = epsilon, logits.dtype
        return (torch.where(keep, loss, 0.0).sum(), torch.where(keep, nll, 0.0).sum())

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        log_probs, target, keep = ctx.saved_tensors
        epsilon, vocab = ctx.epsilon, log_probs.size(-1)
        weight = keep.to(log_probs.dtype)  # padding rows get no gradient
        grad = torch.exp(log_probs)
        grad.mul_(weight * (grad_loss + grad_nll)).sub_(weight * (grad_loss * epsilon / vocab))
        grad.scatter_add_(-1, target.unsqueeze(-1), weight * -(grad_loss * (1.0 - epsilon) + grad_nll))
        return grad.to(ctx.dtype), None, None, None
