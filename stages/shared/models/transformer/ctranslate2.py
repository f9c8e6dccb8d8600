"""The Transformer as a CTranslate2 ``TransformerSpec`` (a ``ctranslate2.Translator``),
filled layer by layer from the trained weights.

The source gets EOS appended (``add_source_eos``) as the tokenize stage does, and the
decoder starts from BOS. Positions are the model's own table (sinusoidal or learned),
written out rather than left to CTranslate2's sinusoids, which lay sine and cosine out
in halves where ours interleave them."""

from __future__ import annotations

from torch import nn

from stages.shared.models.ctranslate2_layers import (
    array,
    cross_attention,
    feed_forward,
    layer_norm,
    linear,
    position_table,
    self_attention,
    special_tokens,
)


def spec(model: nn.Module, src_pieces: list[str], tgt_pieces: list[str], special_ids: dict):
    """A ``TransformerSpec`` holding the trained weights."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ct2

    config = model.config
    # The feed-forward is ReLU (section 3.3); dropout is off at inference.
    model_spec = ct2.TransformerSpec.from_config((config.encoder_layers, config.decoder_layers), config.heads,
                                                 pre_norm=config.pre_norm, activation=common_spec.Activation.RELU)
    special_tokens(model_spec.config, src_pieces, special_ids)
    model_spec.config.add_source_eos = True
    model_spec.config.decoder_start_token = tgt_pieces[special_ids["bos"]]

    encoder, decoder = model_spec.encoder, model_spec.decoder
    encoder.embeddings[0].weight = array(model.src_embedding.weight)
    decoder.embeddings.weight = array(model.tgt_embedding.weight)
    positions = position_table(model.positions, config.max_positions)
    encoder.position_encodings.encodings = positions
    decoder.position_encodings.encodings = positions
    if config.pre_norm:
        layer_norm(encoder.layer_norm, model.encoder_norm)
        layer_norm(decoder.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        self_attention(layer_spec.self_attention, layer.attention, layer.attention_residual.norm)
        feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        self_attention(layer_spec.self_attention, layer.self_attention, layer.self_residual.norm)
        cross_attention(layer_spec.attention, layer.cross_attention, layer.cross_residual.norm)
        feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.norm)
    linear(decoder.projection, model.output)
    for vocabulary, register in ((src_pieces, model_spec.register_source_vocabulary),
                                 (tgt_pieces, model_spec.register_target_vocabulary)):
        register(vocabulary)
    return model_spec
