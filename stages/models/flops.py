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

from torch import nn

from stages.models.decoder_only import DecoderOnlyTranslator, ae_weight
from stages.models.rnn import RnnTranslator
from stages.models.transformer import Transformer


def _attention_layer(queries: int, keys: int, d: int, project_keys: bool = True) -> int:
    projections = 2 * queries * d * d * 2  # query and output projections
    if project_keys:
        projections += 2 * keys * d * d * 2  # key and value projections
    return projections + 2 * 2 * queries * keys * d  # scores and weighted sum


def transformer_forward_flops(model: Transformer, src_len: int, tgt_len: int) -> int:
    c, vocab = model.config, model.output.out_features
    d, S, T = c.d_model, src_len, tgt_len
    encoder = c.encoder_layers * (_attention_layer(S, S, d) + 2 * 2 * S * d * c.ff_dim)
    cross = 2 * T * d * d * 2 + 2 * S * d * d * 2 + 2 * 2 * T * S * d
    decoder = c.decoder_layers * (_attention_layer(T, T, d) + cross + 2 * 2 * T * d * c.ff_dim)
    return encoder + decoder + 2 * T * d * vocab


def decoder_only_forward_flops(model: DecoderOnlyTranslator, src_len: int, tgt_len: int,
                               source_logits: bool = True) -> int:
    c, vocab = model.config, model.output.out_features
    length = src_len + tgt_len + 1  # source tag, source, target tag, target minus its last token
    block = _attention_layer(length, length, c.d_model) + 2 * 2 * length * c.d_model * c.ff_dim
    projected = length if source_logits else tgt_len  # the source tag and source are not projected without
    return c.layers * block + 2 * projected * c.d_model * vocab


def rnn_recurrent_flops(model: RnnTranslator, src_len: int, tgt_len: int) -> int:
    """The gate products of the encoder and decoder recurrences alone."""
    c = model.config
    H, A, half, gates = c.hidden, model.attentional_dim, c.hidden // 2, 4 if c.cell == "lstm" else 3
    encoder = sum(2 * src_len * 2 * ((c.embed_dim if layer == 0 else H) + half) * gates * half  # two directions
                  for layer in range(c.encoder_layers))
    decoder = sum(2 * tgt_len * ((c.embed_dim + A if layer == 0 else H) + H) * gates * H  # input feeding: A wide
                  for layer in range(c.decoder_layers))
    return encoder + decoder


def rnn_forward_flops(model: RnnTranslator, src_len: int, tgt_len: int) -> int:
    c, vocab = model.config, model.output.out_features
    H, A, S, T = c.hidden, model.attentional_dim, src_len, tgt_len
    bridge = c.encoder_layers * 2 * H * H * (2 if c.cell == "lstm" else 1)
    precompute = 0 if c.attention == "dot" else 2 * S * H * H
    per_step = 2 * S * H  # scores (dot, general) or v^T tanh(...) (additive)
    if c.attention == "additive":
        per_step += 2 * H * H  # query projection
    per_step += 2 * S * H + 2 * 2 * H * A + 2 * A * vocab  # weighted sum, combine, output
    return rnn_recurrent_flops(model, S, T) + bridge + precompute + T * per_step


def forward_flops(model: nn.Module, src_len: int, tgt_len: int) -> int:
    if isinstance(model, Transformer):
        return transformer_forward_flops(model, src_len, tgt_len)
    if isinstance(model, DecoderOnlyTranslator):
        return decoder_only_forward_flops(model, src_len, tgt_len)
    if isinstance(model, RnnTranslator):
        return rnn_forward_flops(model, src_len, tgt_len)
    raise TypeError(f"no FLOPs count for {type(model).__name__}")


def training_flops(model: nn.Module, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """3 x forward. ``source_logits=False``: a decoder-only model's update once its
    reconstruction loss has ended, which leaves the source positions unprojected."""
    if not source_logits and isinstance(model, DecoderOnlyTranslator):
        return 3 * decoder_only_forward_flops(model, src_len, tgt_len, source_logits=False)
    return 3 * forward_flops(model, src_len, tgt_len)


def projects_source(model: nn.Module, step: int) -> bool:
    """Whether update ``step`` computes source logits: a decoder-only model's while its
    reconstruction loss weighs something (stages/train/loss.py), never another family."""
    return isinstance(model, DecoderOnlyTranslator) and ae_weight(step, model.config) > 0


def decoding_flops(model: nn.Module, src_len: int, tgt_len: int, beam_size: int) -> int:
    """Estimated FLOPs to translate one sentence of ``src_len`` tokens into ``tgt_len``
    (EOS included) with a beam of ``beam_size``: the work that depends on the source
    alone (the encoder, or the decoder-only model's source prefix) once, the work the
    target adds once per hypothesis in the beam.

    Incremental decoding with cached keys and values computes, step after step, the same
    products as one forward pass over the output, so each hypothesis costs the target
    part of ``forward_flops``. An estimate: every hypothesis is taken at the output's
    length, though the search ends a sentence only once ``beam_size`` have finished.
    """
    source_part = forward_flops(model, src_len, 0)
    target_part = forward_flops(model, src_len, tgt_len) - source_part
    if isinstance(model, DecoderOnlyTranslator):
        # Training predicts every position (the source too, with ae_loss); decoding reads
        # the prompt (source tag and source) without projecting it onto the vocabulary.
        source_part -= 2 * (src_len + 1) * model.config.d_model * model.output.out_features
    return source_part + beam_size * target_part


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Total, embedding (token and learned position tables) and non-embedding parameters.

    Tied matrices count once. The output projection counts as embedding when it is
    tied to the target embedding, and as non-embedding otherwise.
    """
    unique = {id(p): p for p in model.parameters()}
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    total = sum(p.numel() for p in unique.values())
    embedding = sum(unique[i].numel() for i in embedding_ids)
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


def parameter_sides(model: nn.Module) -> dict[str, int]:
    """Parameters by the tokens they are applied to: ``encoder`` (the source's: the
    encoder, and the RNN's bridge from it), ``output`` (the output projection, tied or
    not) and ``decoder`` (the rest but the embedding tables)."""
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


def six_nd(model: nn.Module, src_tokens: float, tgt_tokens: float) -> float:
    """6 x each side's parameters x the tokens that side is applied to (see above)."""
    sides = parameter_sides(model)
    if isinstance(model, DecoderOnlyTranslator):
        # One stack reads source and target, and training projects every position onto
        # the vocabulary (the source's logits feed its reconstruction loss).
        return 6 * (sides["decoder"] + sides["output"]) * (src_tokens + tgt_tokens)
    return 6 * (sides["encoder"] * src_tokens + (sides["decoder"] + sides["output"]) * tgt_tokens)


def cost_summary(model: nn.Module, src_len: float, tgt_len: float) -> dict[str, float]:
    """Parameters and per-target-token FLOPs at (possibly fractional, mean) lengths."""
    src, tgt = max(1, round(src_len)), max(1, round(tgt_len))
    params = parameter_counts(model)
    return {**params,
            "forward_flops_per_tgt_token": forward_flops(model, src, tgt) / tgt,
            "train_flops_per_tgt_token": training_flops(model, src, tgt) / tgt,
            "six_nd_per_tgt_token": six_nd(model, src, tgt) / tgt}
