"""Attention maps of every family: shapes from layers, heads and tokens, rows that sum
to 1, weights that are the ones the fused kernels apply, and alignments."""

from __future__ import annotations

import pytest
import sentencepiece as spm
import torch
import torch.nn.functional as F

from stages.shared.inference.attention import (
    format_alignment,
    hard_alignment,
    sentence_attention,
)
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator
from stages.shared.models.build import build_model
from stages.shared.models.layers import MultiHeadAttention
from stages.tokenize import read_index

SENTENCE = "A man in a blue shirt is riding a bike down the street."
SEARCH = SearchSettings(beam_size=2, max_length_b=6)


def translator_for(tokenized, family: str) -> Translator:
    vocab = read_index(tokenized)["vocab"]
    processor = spm.SentencePieceProcessor(model_file=str(tokenized / vocab["models"]["src"]))
    tags = tuple(processor.piece_to_id(vocab["language_tags"][lang]) for lang in ("en", "de"))
    torch.manual_seed(0)
    model = build_model(family, "tiny", {}, vocab["sizes"]["src"], vocab["sizes"]["tgt"], tags).eval()
    return Translator(model, processor, processor, vocab["special_ids"])


@pytest.fixture(scope="module", params=["transformer", "rnn", "decoder_only"])
def family_attention(request, tokenized):
    translator = translator_for(tokenized, request.param)
    return request.param, translator, sentence_attention(translator, SENTENCE, SEARCH)


def test_every_row_of_every_map_sums_to_one(family_attention):
    _, _, sentence = family_attention
    for attention_map in sentence.maps:
        sums = attention_map.weights.sum(dim=-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (attention_map.kind, attention_map.layer)
        assert (attention_map.weights >= 0).all()


def test_maps_have_the_shapes_that_layers_heads_and_tokens_imply(family_attention):
    family, translator, sentence = family_attention
    config = translator.model.config
    source, target = len(sentence.source_pieces), len(sentence.target_pieces)
    assert sentence.source_pieces[-1] == sentence.target_pieces[-1] == "</s>"
    assert target == len(sentence.translation.hypothesis.tokens) + 1
    shapes = {(m.kind, m.layer): tuple(m.weights.shape) for m in sentence.maps}
    if family == "transformer":
        expected = {**{("encoder self-attention", i): (config.heads, source, source)
                       for i in range(config.encoder_layers)},
                    **{("decoder self-attention", i): (config.heads, target, target)
                       for i in range(config.decoder_layers)},
                    **{("cross-attention", i): (config.heads, target, source) for i in range(config.decoder_layers)}}
    elif family == "rnn":
        expected = {("attention", 0): (1, target, source)}
    else:  # <src-tag> source <tgt-tag> target-without-EOS
        length = 1 + source + 1 + (target - 1)
        expected = {("self-attention", i): (config.heads, length, length) for i in range(config.layers)}
    assert shapes == expected
    for attention_map in sentence.maps:
        assert attention_map.weights.shape[1:] == (len(attention_map.queries), len(attention_map.keys))


def test_decoder_only_maps_mark_the_language_tags_and_stay_causal(tokenized):
    translator = translator_for(tokenized, "decoder_only")
    sentence = sentence_attention(translator, SENTENCE, SEARCH)
    assert sentence.tags == ("__en__", "__de__")
    labels = sentence.maps[0].queries
    assert labels[0] == "__en__" and labels[len(sentence.source_pieces) + 1] == "__de__"
    for attention_map in sentence.maps:
        above_diagonal = attention_map.weights.triu(diagonal=1)
        assert above_diagonal.abs().max() == 0  # no position attends to a later one


def test_explicit_weights_are_the_ones_scaled_dot_product_attention_applies():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, dropout=0.0).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    key_mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    key_mask[1, ..., 4:] = False
    keys, values = attention.keys_values(memory)
    for mask, causal, (k, v) in ((key_mask, False, (keys, values)),
                                 (None, True, attention.keys_values(x))):
        weights = attention.weights(x, k, mask, causal)
        expected = F.scaled_dot_product_attention(attention.split_heads(attention.query(x)), k, v,
                                                  attn_mask=mask, is_causal=causal)
        assert torch.allclose(weights @ v, expected, atol=1e-5)


def test_hard_alignment_links_every_target_word_to_a_source_word(family_attention):
    _, _, sentence = family_attention
    links = hard_alignment(sentence)
    source_words, target_words = words(sentence.source_pieces[:-1]), words(sentence.target_pieces[:-1])
    if len(sentence.target_pieces) > 1:
        assert {j for _, j in links} == set(range(target_words))
    assert all(0 <= i < source_words for i, _ in links)
    assert format_alignment([(0, 0), (2, 1)]) == "0-0 2-1"


def words(pieces: list[str]) -> int:
    """Words in SentencePiece pieces: each '\u2581' starts one, and so does the first piece."""
    return sum(piece.startswith("\u2581") or index == 0 for index, piece in enumerate(pieces))
