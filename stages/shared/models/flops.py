"""FLOPs per sentence pair, counted from each family's layer shapes.

A matrix product of (m x k) by (k x n) is 2mkn FLOPs. Counted: every linear layer,
attention scores and attention-weighted sums (over all key positions, causal or not,
as the kernels compute them), recurrent gate products and the output projection.
Not counted: embeddings lookups, softmax, normalization, activations and other
elementwise work, which are a few percent at these widths (and invisible to
torch.utils.flop_counter too). Training = 3 x forward: the backward pass costs two
forward passes (gradients with respect to inputs and to weights).

``six_nd`` is the Kaplan et al. (2020) estimate 6 * N * D, for comparison, taken side
by side as an encoder-decoder computes: each parameter times the tokens it is applied
to. The encoder's parameters see the source tokens, the decoder's and the output
projection's the target tokens (a decoder-only model's see both: it projects every
position in training). The output projection counts whether or not it is tied to an
embedding: tied, it is still a matrix product at every position, and at these widths it
is about half of the forward FLOPs. Embedding lookups are left out, as Kaplan et al. do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.shared.models.families import family, family_of


@dataclass(frozen=True)
class OutputShape:
    out_features: int  # the output projection's width: the target vocabulary


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs of a family read from a model (``family``, ``config``,
    ``output.out_features``), without its weights or torch: ``nmt inspect`` counts a
    config's models from it as from built ones."""

    family: str
    config: Any
    output: OutputShape


def forward_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """One teacher-forced forward pass over a pair, counted by the model's family.
    ``source_logits=False``: a family that also predicts its source (the decoder-only
    model's reconstruction loss) leaves the source positions unprojected."""
    return family_of(model).forward_flops(model, src_len, tgt_len, source_logits)


def training_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """3 x forward. ``source_logits=False``: an update that does not predict the source."""
    return 3 * forward_flops(model, src_len, tgt_len, source_logits)


def projects_source(model, step: int) -> bool:
    """Whether update ``step`` computes source logits: only where the model's family
    also predicts the source at that step (stages/shared/models/loss.py)."""
    predicts_source = family_of(model).predicts_source
    return predicts_source is not None and predicts_source(model, step)


def decoding_flops(model, src_len: int, tgt_len: int, beam_size: int) -> int:
    """Estimated FLOPs to translate one sentence of ``src_len`` tokens into ``tgt_len``
    (EOS included) with a beam of ``beam_size``: the work that depends on the source
    alone (the encoder, or the decoder-only model's source prefix) once, the work the
    target adds once per hypothesis in the beam.

    Incremental decoding with cached keys and values computes, step after step, the same
    products as one forward pass over the output, so each hypothesis costs the target
    part of ``forward_flops``. An estimate: every hypothesis is taken at the output's
    length, though the search ends a sentence only once ``beam_size`` have finished.
    """
    # Decoding reads the source (a decoder-only model's prompt) without projecting it onto
    # the vocabulary, whatever training predicted.
    source_part = forward_flops(model, src_len, 0, source_logits=False)
    target_part = forward_flops(model, src_len, tgt_len, source_logits=False) - source_part
    return source_part + beam_size * target_part


def parameter_counts(model) -> dict[str, int]:
    """Total, embedding (token and learned position tables) and non-embedding parameters
    of a built model.

    Tied matrices count once. The output projection counts as embedding when it is
    tied to the target embedding, and as non-embedding otherwise.
    """
    from torch import nn

    unique = {id(p): p for p in model.parameters()}
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    total = sum(p.numel() for p in unique.values())
    embedding = sum(unique[i].numel() for i in embedding_ids)
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


def parameter_sides(model) -> dict[str, int]:
    """A built model's parameters by the tokens they are applied to: ``encoder`` (the
    source's: the encoder, and the RNN's bridge from it), ``output`` (the output
    projection, tied or not) and ``decoder`` (the rest but the embedding tables)."""
    from torch import nn

    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    output_ids = {id(p) for p in model.output.parameters()}
    sides, seen = {"encoder": 0, "decoder": 0, "output": 0}, set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        if id(parameter) in output_ids:
            sides["output"] += parameter.numel()
        elif id(parameter) not in embedding_ids:
            side = "encoder" if name.split(".")[0] in ("encoder", "encoder_norm", "bridge") else "decoder"
            sides[side] += parameter.numel()
    return sides


def six_nd(model, src_tokens: float, tgt_tokens: float) -> float:
    """6 x each side's parameters x the tokens that side is applied to (see above), for
    a built model."""
    return six_nd_of_sides(parameter_sides(model), family_of(model).one_stack, src_tokens, tgt_tokens)


def six_nd_of_sides(sides: dict[str, int], one_stack: bool, src_tokens: float, tgt_tokens: float) -> float:
    if one_stack:
        # One stack reads source and target, and training projects every position onto
        # the vocabulary (the source's logits feed its reconstruction loss).
        return 6 * (sides["decoder"] + sides["output"]) * (src_tokens + tgt_tokens)
    return 6 * (sides["encoder"] * src_tokens + (sides["decoder"] + sides["output"]) * tgt_tokens)


def cost_summary(family_name: str, config, src_vocab: int, tgt_vocab: int, src_len: float,
                 tgt_len: float) -> dict[str, float]:
    """Parameters and per-target-token FLOPs of a family's model of ``config`` at
    (possibly fractional, mean) lengths, counted from the config alone (torch-free).
    ValueError names what the vocabularies cannot build."""
    record = family(family_name)
    record.check_vocabularies(src_vocab, tgt_vocab)
    src, tgt = max(1, round(src_len)), max(1, round(tgt_len))
    layout = record.parameter_layout(config, src_vocab, tgt_vocab)
    shape = ModelShape(family_name, config, OutputShape(tgt_vocab))
    return {**layout.counts(),
            "forward_flops_per_tgt_token": forward_flops(shape, src, tgt) / tgt,
            "train_flops_per_tgt_token": training_flops(shape, src, tgt) / tgt,
            "six_nd_per_tgt_token": six_nd_of_sides(layout.sides(), record.one_stack, src, tgt) / tgt}
