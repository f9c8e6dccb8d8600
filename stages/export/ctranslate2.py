"""Our Transformer as a CTranslate2 ``TransformerSpec``, our decoder-only model as a
``TransformerDecoderModelSpec``, filled layer by layer from the trained weights.

CTranslate2 reads tokens as strings: the vocabulary is the SentencePiece model's pieces
in id order, so piece i is our token id i. The source gets EOS appended
(``add_source_eos``) as the tokenize stage does, and the decoder starts from BOS.
Positions are the model's own table (sinusoidal or learned), written out rather than
left to CTranslate2's sinusoids, which lay sine and cosine out in halves where ours
interleave them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import sentencepiece as spm
from torch import Tensor, nn

from stages.export import ExportError

# Our LayerNorms are torch's default; CTranslate2's default epsilon is 1e-6.
LAYER_NORM_EPSILON = 1e-5
# What the export writes beside the model: how to call it (for nmt serve and people).
EXPORT_INFO = "nmt_export.json"


def write_ctranslate2(model: nn.Module, data: dict, files, output: Path, quantization: str | None) -> None:
    from ctranslate2.converters.converter import Converter

    family = model.family
    if family == "rnn":
        raise ExportError("the ctranslate2 format does not support the rnn family: CTranslate2 runs Transformer "
                          "models only (export a transformer or decoder_only model)")
    src_pieces, tgt_pieces = pieces(files.src_spm), pieces(files.tgt_spm)
    if family == "transformer":
        spec = transformer_spec(model, src_pieces, tgt_pieces, data["vocabulary"]["special_ids"])
    else:
        spec = decoder_only_spec(model, src_pieces, data["vocabulary"]["special_ids"])

    class TrainedModel(Converter):  # the converter API: validate, quantize, save
        def _load(self):
            return spec

    TrainedModel().convert(str(output), quantization=quantization, force=True)
    for path in {files.src_spm, files.tgt_spm}:
        (output / path.name).write_bytes(path.read_bytes())
    info = {"format": "ctranslate2", "family": family, "quantization": quantization or "float32",
            "source": str(files.weights), "src_spm": files.src_spm.name, "tgt_spm": files.tgt_spm.name,
            "special_ids": data["vocabulary"]["special_ids"]}
    if family == "decoder_only":
        # A Generator continues a prompt: <src-tag> source </s> <tgt-tag>, as the model was trained.
        info["prompt"] = {"before_source": [src_pieces[model.src_tag_id]],
                          "after_source": ["</s>", src_pieces[model.tgt_tag_id]]}
    (output / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")


def pieces(spm_file: Path) -> list[str]:
    processor = spm.SentencePieceProcessor(model_file=str(spm_file))
    return [processor.id_to_piece(index) for index in range(processor.get_piece_size())]


def transformer_spec(model: nn.Module, src_pieces: list[str], tgt_pieces: list[str], special_ids: dict):
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ct2

    config = model.config
    # The feed-forward is ReLU (section 3.3); dropout is off at inference.
    spec = ct2.TransformerSpec.from_config((config.encoder_layers, config.decoder_layers), config.heads,
                                           pre_norm=config.pre_norm, activation=common_spec.Activation.RELU)
    _special_tokens(spec.config, src_pieces, special_ids)
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = tgt_pieces[special_ids["bos"]]

    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = _array(model.src_embedding.weight)
    decoder.embeddings.weight = _array(model.tgt_embedding.weight)
    positions = _position_table(model.positions, config.max_positions)
    encoder.position_encodings.encodings = positions
    decoder.position_encodings.encodings = positions
    if config.pre_norm:
        _layer_norm(encoder.layer_norm, model.encoder_norm)
        _layer_norm(decoder.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        _self_attention(layer_spec.self_attention, layer.attention, layer.attention_residual.norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _self_attention(layer_spec.self_attention, layer.self_attention, layer.self_residual.norm)
        _cross_attention(layer_spec.attention, layer.cross_attention, layer.cross_residual.norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.norm)
    _linear(decoder.projection, model.output)
    for vocabulary, register in ((src_pieces, spec.register_source_vocabulary),
                                 (tgt_pieces, spec.register_target_vocabulary)):
        register(vocabulary)
    return spec


def decoder_only_spec(model: nn.Module, vocab_pieces: list[str], special_ids: dict):
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ct2

    config = model.config
    if config.prefix_attention:
        raise ExportError("the ctranslate2 format does not support a decoder-only model trained with "
                          "prefix_attention: a CTranslate2 Generator attends causally over the whole prompt")
    # Wang et al.'s stack: pre-LN, GELU (erf form, torch's default), a final LayerNorm.
    spec = ct2.TransformerDecoderModelSpec.from_config(config.layers, config.heads, pre_norm=True,
                                                       activation=common_spec.Activation.GELU)
    _special_tokens(spec.config, vocab_pieces, special_ids)
    decoder = spec.decoder
    decoder.embeddings.weight = _array(model.embedding.weight)
    decoder.position_encodings.encodings = _position_table(model.positions, config.max_positions)
    _layer_norm(decoder.layer_norm, model.final_norm)
    for layer_spec, block in zip(decoder.layer, model.blocks):
        _self_attention(layer_spec.self_attention, block.attention, block.attention_residual.norm)
        _feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_residual.norm)
    _linear(decoder.projection, model.output)
    spec.register_vocabulary(vocab_pieces)
    return spec


def _special_tokens(config, vocab_pieces: list[str], special_ids: dict) -> None:
    config.unk_token = vocab_pieces[special_ids["unk"]]
    config.bos_token = vocab_pieces[special_ids["bos"]]
    config.eos_token = vocab_pieces[special_ids["eos"]]
    config.layer_norm_epsilon = LAYER_NORM_EPSILON


def _array(tensor: Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _position_table(positions: nn.Module, max_positions: int) -> np.ndarray:
    """(max_positions, d_model): the table our model adds to its scaled embeddings."""
    import torch

    return _array(positions(torch.arange(max_positions)))


def _linear(spec, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _fused(spec, linears: list[nn.Linear]) -> None:
    """One projection for several (queries, keys and values): their rows stacked."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _layer_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _self_attention(spec, attention: nn.Module, norm: nn.LayerNorm) -> None:
    _fused(spec.linear[0], [attention.query, attention.key, attention.value])
    _linear(spec.linear[1], attention.out)
    _layer_norm(spec.layer_norm, norm)


def _cross_attention(spec, attention: nn.Module, norm: nn.LayerNorm) -> None:
    _linear(spec.linear[0], attention.query)
    _fused(spec.linear[1], [attention.key, attention.value])
    _linear(spec.linear[2], attention.out)
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec, feed_forward: nn.Module, norm: nn.LayerNorm) -> None:
    _linear(spec.linear_0, feed_forward.inner)
    _linear(spec.linear_1, feed_forward.outer)
    _layer_norm(spec.layer_norm, norm)
