"""Our Transformer as a Hugging Face ``MarianMTModel`` with its ``MarianTokenizer``.

Marian's architecture in ``transformers`` is the paper's: post-LN layers, ReLU or GELU
feed-forward, embeddings scaled by sqrt(d_model), fixed sinusoidal positions, shared
embeddings. Its sinusoids are not stored in the checkpoint but rebuilt on load, with
sines in the first half of the model dimension and cosines in the second, where ours
interleave them (sin at even, cos at odd dimensions). The export therefore permutes
the model dimension: every weight that reads the residual stream has its input columns
reordered, every one that writes it its output rows, and the LayerNorms follow. The
network computes exactly what ours does, with the dimensions in Marian's order.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import sentencepiece as spm
import torch
from torch import Tensor, nn

from stages.shared.export import ExportError
from stages.shared.models.families import family_of


def write_marian(model: nn.Module, data: dict, files, output: Path) -> None:
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    from transformers.utils import logging as transformers_logging

    # Its bar over the one shard a model this size is written as says nothing to a user.
    transformers_logging.disable_progress_bar()

    config = check_exportable(model)
    special_ids = data["vocabulary"]["special_ids"]
    vocab_size = model.src_embedding.num_embeddings
    hf_config = MarianConfig(
        vocab_size=vocab_size, d_model=config.d_model, max_position_embeddings=config.max_positions,
        encoder_layers=config.encoder_layers, decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.heads, decoder_attention_heads=config.heads,
        encoder_ffn_dim=config.ff_dim, decoder_ffn_dim=config.ff_dim, activation_function="relu",
        dropout=config.dropout, attention_dropout=config.attention_dropout, scale_embedding=True,
        pad_token_id=special_ids["pad"], eos_token_id=special_ids["eos"], bos_token_id=special_ids["bos"],
        decoder_start_token_id=special_ids["bos"], forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    hf_model = MarianMTModel(hf_config).eval()
    state = marian_state_dict(model)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    left = [name for name in missing if "embed_positions" not in name]
    if left or unexpected:  # a transformers version that renamed Marian's modules
        raise ExportError(f"MarianMTModel's weights did not line up: missing {left}, unexpected {unexpected}")
    hf_model.save_pretrained(output)

    # MarianTokenizer maps SentencePiece pieces to ids through vocab.json: ours are the
    # SentencePiece ids themselves, and it appends </s> to the source as we do.
    processor = spm.SentencePieceProcessor(model_file=str(files.src_spm))
    vocab_file = output / "vocab.json"
    vocab_file.write_text(json.dumps({processor.id_to_piece(i): i for i in range(processor.get_piece_size())},
                                     ensure_ascii=False))
    with warnings.catch_warnings():
        # MarianTokenizer recommends sacremoses for Moses punctuation normalisation, which
        # this tokenizer does not use (its pieces are the SentencePiece model's).
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        tokenizer = MarianTokenizer(str(files.src_spm), str(files.tgt_spm), str(vocab_file),
                                    unk_token=processor.id_to_piece(special_ids["unk"]),
                                    eos_token=processor.id_to_piece(special_ids["eos"]),
                                    pad_token=processor.id_to_piece(special_ids["pad"]),
                                    model_max_length=config.max_positions)
    tokenizer.save_pretrained(output)


def check_exportable(model: nn.Module):
    """The Transformer's config, if MarianMTModel can hold it; else why not."""
    if not family_of(model).marian:
        raise ExportError(f"the huggingface format (MarianMTModel) does not support the {model.family} family: "
                          "it holds encoder-decoder Transformers (for a decoder-only model, use --format "
                          "ctranslate2, which exports it as a Generator)")
    config = model.config
    if config.pre_norm:
        raise ExportError("the huggingface format does not support pre_norm: true: MarianMTModel is post-LN "
                          "(use --format ctranslate2, which supports both)")
    if config.learned_positions:
        raise ExportError("the huggingface format does not support learned_positions: true: MarianMTModel's "
                          "positions are fixed sinusoids (use --format ctranslate2)")
    if not config.share_embeddings:
        raise ExportError("the huggingface format needs share_embeddings: true (a joint vocabulary)")
    return config


def marian_dimension_order(d_model: int) -> Tensor:
    """Marian's dimension i is our dimension order[i]: sines (ours at even dimensions)
    first, then cosines (ours at odd)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_state_dict(model: nn.Module) -> dict[str, Tensor]:
    order = marian_dimension_order(model.config.d_model)

    def reads(linear: nn.Linear, name: str) -> dict[str, Tensor]:  # input from the residual stream
        return {f"{name}.weight": linear.weight[:, order], f"{name}.bias": linear.bias}

    def writes(linear: nn.Linear, name: str) -> dict[str, Tensor]:  # output into the residual stream
        return {f"{name}.weight": linear.weight[order], f"{name}.bias": linear.bias[order]}

    def norm(layer_norm: nn.LayerNorm, name: str) -> dict[str, Tensor]:
        return {f"{name}.weight": layer_norm.weight[order], f"{name}.bias": layer_norm.bias[order]}

    def attention(module: nn.Module, name: str) -> dict[str, Tensor]:
        return {**reads(module.query, f"{name}.q_proj"), **reads(module.key, f"{name}.k_proj"),
                **reads(module.value, f"{name}.v_proj"), **writes(module.out, f"{name}.out_proj")}

    def feed_forward(module: nn.Module, name: str) -> dict[str, Tensor]:
        return {**reads(module.inner, f"{name}.fc1"), **writes(module.outer, f"{name}.fc2")}

    embedding = model.src_embedding.weight[:, order]
    state = {"model.shared.weight": embedding, "model.encoder.embed_tokens.weight": embedding,
             "model.decoder.embed_tokens.weight": embedding, "lm_head.weight": model.output.weight[:, order],
             "final_logits_bias": torch.zeros(1, embedding.size(0))}
    for i, layer in enumerate(model.encoder):
        prefix = f"model.encoder.layers.{i}"
        state.update(attention(layer.attention, f"{prefix}.self_attn"))
        state.update(norm(layer.attention_residual.norm, f"{prefix}.self_attn_layer_norm"))
        state.update(feed_forward(layer.feed_forward, prefix))
        state.update(norm(layer.feed_forward_residual.norm, f"{prefix}.final_layer_norm"))
    for i, layer in enumerate(model.decoder):
        prefix = f"model.decoder.layers.{i}"
        state.update(attention(layer.self_attention, f"{prefix}.self_attn"))
        state.update(norm(layer.self_residual.norm, f"{prefix}.self_attn_layer_norm"))
        state.update(attention(layer.cross_attention, f"{prefix}.encoder_attn"))
        state.update(norm(layer.cross_residual.norm, f"{prefix}.encoder_attn_layer_norm"))
        state.update(feed_forward(layer.feed_forward, prefix))
        state.update(norm(layer.feed_forward_residual.norm, f"{prefix}.final_layer_norm"))
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}
