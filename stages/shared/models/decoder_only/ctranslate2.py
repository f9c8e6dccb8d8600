"""The decoder-only model as a CTranslate2 ``TransformerDecoderModelSpec`` (a
``ctranslate2.Generator`` continuing the prompt ``<src-tag> source </s> <tgt-tag>``),
filled layer by layer from the trained weights."""

from __future__ import annotations

from torch import nn

from stages.shared.models.ctranslate2_layers import (
    array,
    feed_forward,
    layer_norm,
    linear,
    position_table,
    self_attention,
    special_tokens,
)


def refuses(model: nn.Module) -> str | None:
    """Why CTranslate2 cannot run this model, or None."""
    if model.config.prefix_attention:
        return ("a decoder-only model trained with prefix_attention: a CTranslate2 Generator attends causally "
                "over the whole prompt")
    return None


def spec(model: nn.Module, vocab_pieces: list[str], tgt_pieces: list[str], special_ids: dict):
    """A ``TransformerDecoderModelSpec`` holding the trained weights (one joint
    vocabulary: ``tgt_pieces`` are ``vocab_pieces``)."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ct2

    config = model.config
    # Wang et al.'s stack: pre-LN, GELU (erf form, torch's default), a final LayerNorm.
    model_spec = ct2.TransformerDecoderModelSpec.from_config(config.layers, config.heads, pre_norm=True,
                                                             activation=common_spec.Activation.GELU)
    special_tokens(model_spec.config, vocab_pieces, special_ids)
    decoder = model_spec.decoder
    decoder.embeddings.weight = array(model.embedding.weight)
    decoder.position_encodings.encodings = position_table(model.positions, config.max_positions)
    layer_norm(decoder.layer_norm, model.final_norm)
    for layer_spec, block in zip(decoder.layer, model.blocks):
        self_attention(layer_spec.self_attention, block.attention, block.attention_residual.norm)
        feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_residual.norm)
    linear(decoder.projection, model.output)
    model_spec.register_vocabulary(vocab_pieces)
    return model_spec
