"""Attention gives the same outputs whatever form its mask takes, and whichever SDPA
kernel runs it: the forms differ in which fused kernels accept them (flash takes no
mask, only is_causal; the memory-efficient and the CPU kernels take a broadcast key
mask), so the models pick the form per call and these tests hold the forms equal."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from stages.shared.models.decoder_only.model import DecoderOnlyTranslator
from stages.shared.models.decoder_only.config import PRESETS as DECODER_ONLY_PRESETS
from stages.shared.models.transformer.config import PRESETS as TRANSFORMER_PRESETS
from stages.shared.models.layers import MultiHeadAttention
from stages.shared.models.transformer.model import Transformer

BATCH, HEADS, LENGTH, WIDTH = 3, 4, 9, 32
CPU_KERNELS = [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]  # FLASH: the fused CPU kernel


def _attention_inputs():
    torch.manual_seed(0)
    attention = MultiHeadAttention(WIDTH, HEADS, dropout=0.0).eval()
    x = torch.randn(BATCH, LENGTH, WIDTH)
    lengths = torch.tensor([LENGTH, 5, 1])
    key_valid = torch.arange(LENGTH)[None, :] < lengths[:, None]  # (B, S)
    return attention, x, key_valid


@pytest.mark.parametrize("kernel", CPU_KERNELS, ids=lambda k: k.name)
def test_key_padding_mask_layouts_agree(kernel):
    attention, x, key_valid = _attention_inputs()
    keys, values = attention.keys_values(x)
    broadcast = key_valid[:, None, None, :]
    layouts = {
        "bool (B,1,1,S)": broadcast,
        "bool (B,H,T,S)": broadcast.expand(BATCH, HEADS, LENGTH, LENGTH).contiguous(),
        "additive (B,1,1,S)": torch.zeros(broadcast.shape).masked_fill(~broadcast, float("-inf")),
    }
    with torch.no_grad():
        reference = attention(x, keys, values, layouts["bool (B,1,1,S)"])
        with sdpa_kernel([kernel]):
            for name, mask in layouts.items():
                torch.testing.assert_close(attention(x, keys, values, mask), reference, msg=name,
                                           atol=1e-5, rtol=1e-5)
    # Masked keys really are ignored: changing them changes nothing.
    noisy_keys = keys.masked_fill(~key_valid[:, None, :, None], 1e3)
    with torch.no_grad():
        torch.testing.assert_close(attention(x, noisy_keys, values, broadcast), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", CPU_KERNELS, ids=lambda k: k.name)
def test_is_causal_equals_an_explicit_triangular_mask(kernel):
    attention, x, _ = _attention_inputs()
    keys, values = attention.keys_values(x)
    triangle = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
    with torch.no_grad(), sdpa_kernel([kernel]):
        torch.testing.assert_close(attention(x, keys, values, causal=True), attention(x, keys, values, triangle),
                                   atol=1e-5, rtol=1e-5)


def _padded(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [0] * (width - len(row)) for row in rows])


@pytest.mark.parametrize("kernel", CPU_KERNELS, ids=lambda k: k.name)
def test_a_sentence_translates_the_same_alone_and_padded_in_a_batch(kernel):
    """Padding in the source and the target must not leak into a sentence's logits."""
    torch.manual_seed(0)
    transformer = Transformer(TRANSFORMER_PRESETS["tiny"], 50, 50).eval()
    decoder_only = DecoderOnlyTranslator(DECODER_ONLY_PRESETS["tiny"], 50, 4, 5).eval()
    short_src, short_tgt = [7, 8, 9, 3], [2, 10, 11]
    long_src, long_tgt = [7, 12, 13, 14, 15, 16, 17, 3], [2, 18, 19, 20, 21, 22]
    for model in (transformer, decoder_only):
        with torch.no_grad(), sdpa_kernel([kernel]):
            alone = model(torch.tensor([short_src]), torch.tensor([short_tgt]))[0]
            batched = model(_padded([long_src, short_src]), _padded([long_tgt, short_tgt]))[1, :len(short_tgt)]
        torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5, msg=model.family)
