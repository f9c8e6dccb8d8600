"""The three model families: one decoding interface, causality, padding, FLOPs, size."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from stages.shared.models.convs2s.config import PRESETS as CONVS2S_PRESETS
from stages.shared.models.convs2s.model import ConvS2STranslator
from stages.shared.models.decoder_only.config import ae_weight
from stages.shared.models.decoder_only.model import DecoderOnlyTranslator
from stages.shared.models.decoder_only.config import PRESETS as DECODER_ONLY_PRESETS
from stages.shared.models.families import FAMILIES, NAMES, family
from stages.shared.models.rnn.config import PRESETS as RNN_PRESETS
from stages.shared.models.transformer.config import PRESETS as TRANSFORMER_PRESETS
from stages.shared.models.rnn.model import RnnTranslator
from stages.shared.models.transformer.model import Transformer
from stages.shared.models.flops import forward_flops, parameter_counts
from stages.shared.models.rnn.flops import recurrent_flops as rnn_recurrent_flops
from stages.shared.models.cross_entropy import label_smoothed_cross_entropy

VOCAB, PAD, BOS, EOS, SRC_TAG, TGT_TAG = 60, 0, 2, 3, 4, 5


def make(kind: str):
    torch.manual_seed(0)
    tiny_transformer, tiny_rnn, tiny_decoder = TRANSFORMER_PRESETS["tiny"], RNN_PRESETS["tiny"], DECODER_ONLY_PRESETS["tiny"]
    models = {
        "transformer_post_ln": lambda: Transformer(tiny_transformer, VOCAB, VOCAB),
        "transformer_pre_ln_learned": lambda: Transformer(replace(tiny_transformer, pre_norm=True,
                                                                  learned_positions=True, share_embeddings=False),
                                                          VOCAB, VOCAB),
        "rnn_lstm_additive": lambda: RnnTranslator(replace(tiny_rnn, encoder_layers=2, decoder_layers=2), VOCAB, VOCAB),
        "rnn_gru_general": lambda: RnnTranslator(replace(tiny_rnn, cell="gru", attention="general"), VOCAB, VOCAB),
        "rnn_lstm_dot_tied": lambda: RnnTranslator(replace(tiny_rnn, attention="dot", embed_dim=128,
                                                           tie_embeddings=True), VOCAB, VOCAB),
        # nmtpytorch's hid2out bottleneck: the attentional vector as wide as the embeddings
        "rnn_gru_bottleneck_tied": lambda: RnnTranslator(replace(tiny_rnn, cell="gru", attentional_dim=64,
                                                                 tie_embeddings=True), VOCAB, VOCAB),
        "decoder_only": lambda: DecoderOnlyTranslator(tiny_decoder, VOCAB, SRC_TAG, TGT_TAG),
        "decoder_only_prefix": lambda: DecoderOnlyTranslator(replace(tiny_decoder, prefix_attention=True),
                                                             VOCAB, SRC_TAG, TGT_TAG),
        # Narrow and shallow: a kernel of 5 still reaches past the sources' padding.
        "convs2s": lambda: ConvS2STranslator(replace(CONVS2S_PRESETS["tiny"], embed_dim=32, hidden=48,
                                                     out_embed_dim=32, encoder_layers=2, decoder_layers=3,
                                                     kernel_size=5), VOCAB, VOCAB),
    }
    return models[kind]().eval()


KINDS = ["transformer_post_ln", "transformer_pre_ln_learned", "rnn_lstm_additive", "rnn_gru_general",
         "rnn_lstm_dot_tied", "rnn_gru_bottleneck_tied", "decoder_only", "decoder_only_prefix", "convs2s"]


def batch(batch_size=3, src_len=9, tgt_len=7, seed=1):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(6, VOCAB, (batch_size, src_len), generator=generator)
    if batch_size > 1:
        src[1, 6:] = PAD  # a shorter source in the batch
    tgt = torch.randint(6, VOCAB, (batch_size, tgt_len), generator=generator)
    tgt[:, 0] = BOS
    return src, tgt


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_matches_the_teacher_forced_forward(kind):
    model = make(kind)
    src, tgt_in = batch()
    with torch.no_grad():
        full = torch.log_softmax(model(src, tgt_in), dim=-1)
        state = model.start_decoding(src)
        steps = []
        for t in range(tgt_in.size(1)):
            log_probs, state = model.decode_step(state, tgt_in[:, t])
            steps.append(log_probs)
    assert (full - torch.stack(steps, dim=1)).abs().max() < 1e-4


def test_every_family_of_the_list_has_a_kind_here():
    """The kinds above cover each family in stages/shared/models/families.py: a family added
    there and not here fails."""
    assert {make(kind).family for kind in KINDS} == set(NAMES)


@pytest.mark.parametrize("family", FAMILIES, ids=NAMES)
def test_every_family_s_tiny_preset_gives_logits_of_the_vocabulary_for_each_target_position(family):
    from stages.shared.models.build import build_model

    model = build_model(family.name, "tiny", {}, VOCAB, VOCAB, (SRC_TAG, TGT_TAG)).eval()
    src, tgt_in = batch()
    with torch.no_grad():
        assert model(src, tgt_in).shape == (3, tgt_in.size(1), VOCAB)


@pytest.mark.parametrize("kind", KINDS)
def test_reordering_the_state_reorders_the_next_step(kind):
    model = make(kind)
    src, tgt_in = batch()
    order = torch.tensor([2, 0, 0])
    with torch.no_grad():
        state = model.start_decoding(src)
        _, state = model.decode_step(state, tgt_in[:, 0])
        reordered, _ = model.decode_step(model.reorder_state(state, order), tgt_in[order, 1])
        expected, _ = model.decode_step(state, tgt_in[:, 1])
    assert torch.allclose(reordered, expected[order], atol=1e-5)


@pytest.mark.parametrize("kind", ["transformer_post_ln", "transformer_pre_ln_learned"])
def test_beam_search_with_the_encoding_once_per_sentence_finds_what_one_per_beam_finds(kind):
    """The Transformer keeps cross-attention keys and values once per sentence in beam
    search; with a copy per beam row (``sentences`` not given) the search must be the same."""
    from stages.shared.inference.beam import beam_search

    model = make(kind)
    src, _ = batch(batch_size=5, src_len=9)
    search = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD, max_length_b=12, nbest=3)
    once_per_sentence = beam_search(model, src, 4, **search)
    model.reorder_state = lambda state, order, sentences=None: state.reorder(order)  # one per row
    once_per_row = beam_search(model, src, 4, **search)
    assert [[h.tokens for h in hs] for hs in once_per_sentence] == [[h.tokens for h in hs] for hs in once_per_row]
    for mine, theirs in zip(once_per_sentence, once_per_row):
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_outputs_before_t_ignore_target_tokens_from_t_on(kind):
    model = make(kind)
    src, tgt_in = batch()
    changed = tgt_in.clone()
    changed[:, 4:] = torch.randint(6, VOCAB, changed[:, 4:].shape)
    with torch.no_grad():
        before, after = model(src, tgt_in), model(src, changed)
    assert torch.allclose(before[:, :4], after[:, :4], atol=1e-5)
    assert not torch.allclose(before[:, 4:], after[:, 4:], atol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_extra_padding_changes_no_output_at_real_positions(kind):
    model = make(kind)
    src, tgt_in = batch()
    padded_src = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    padded_tgt = torch.cat([tgt_in, torch.full((3, 3), PAD)], dim=1)
    with torch.no_grad():
        plain, padded = model(src, tgt_in), model(padded_src, padded_tgt)
    assert torch.allclose(plain, padded[:, : tgt_in.size(1)], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("src_len, tgt_len", [(7, 9), (20, 13), (41, 37)])
def test_counted_flops_agree_with_torch_flop_counter(kind, src_len, tgt_len):
    model = make(kind)
    src, tgt_in = batch(1, src_len, tgt_len)
    # SDPA's fused CPU kernel is invisible to FlopCounterMode; the math backend runs the
    # same products as visible bmm calls. nn.LSTM on CPU is invisible too: for LSTMs
    # the counter sees everything but the recurrent gate products.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(src, tgt_in)
    ours = forward_flops(model, src_len, tgt_len)
    if isinstance(model, RnnTranslator) and model.config.cell == "lstm":
        ours -= rnn_recurrent_flops(model, src_len, tgt_len)
    assert abs(ours - counter.get_total_flops()) <= 0.02 * counter.get_total_flops()


@pytest.mark.trains
@pytest.mark.parametrize("kind", ["transformer_post_ln", "rnn_gru_general", "rnn_lstm_additive", "decoder_only"])
def test_each_family_overfits_a_batch_of_32_pairs(kind):
    torch.manual_seed(0)
    model = make(kind).train()
    model.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, torch.nn.Dropout) else None)
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(6, VOCAB, (32, 8), generator=generator)
    tgt = torch.cat([torch.randint(6, VOCAB, (32, 7), generator=generator), torch.full((32, 1), EOS)], dim=1)
    tgt_in = torch.cat([torch.full((32, 1), BOS), tgt[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        optimizer.zero_grad()
        _, nll = label_smoothed_cross_entropy(model(src, tgt_in), tgt, epsilon=0.0)
        loss = nll / tgt.numel()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.1:
            break
    assert loss.item() < 0.1


def test_label_smoothing_ignores_padding_and_matches_a_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, 1.0], [0.5, 0.5, 0.5]]])
    target = torch.tensor([[2, 0]])  # the second position is padding
    loss, nll = label_smoothed_cross_entropy(logits, target, epsilon=0.1, pad_id=0)
    log_probs = torch.log_softmax(logits[0, 0], dim=-1)
    assert torch.isclose(nll, -log_probs[2])
    assert torch.isclose(loss, 0.9 * -log_probs[2] + 0.1 * -log_probs.mean())


def test_ae_weight_decays_piecewise_linearly():
    config = replace(DECODER_ONLY_PRESETS["tiny"], ae_alpha=0.1, ae_steps=100)
    assert [ae_weight(step, config) for step in (0, 50, 99, 100, 500)] == pytest.approx([1.0, 0.55, 0.109, 0.0, 0.0])
    assert ae_weight(0, replace(config, ae_loss=False)) == 0.0


@pytest.mark.parametrize("preset, paper", [("base", 65e6), ("big", 213e6)])
def test_transformer_presets_match_the_papers_parameter_counts(preset, paper):
    model = Transformer(TRANSFORMER_PRESETS[preset], 37_000, 37_000)
    assert abs(parameter_counts(model)["total"] - paper) <= 0.05 * paper


def test_base_presets_of_the_three_families_are_comparable_in_size():
    totals = [parameter_counts(model)["total"] for model in (
        Transformer(TRANSFORMER_PRESETS["base"], 37_000, 37_000),
        RnnTranslator(RNN_PRESETS["base"], 37_000, 37_000),
        DecoderOnlyTranslator(DECODER_ONLY_PRESETS["base"], 37_000, SRC_TAG, TGT_TAG))]
    assert max(totals) <= 1.1 * min(totals)


FRONTIER_SIZES = ("w32", "w64", "w128", "w256")


@pytest.mark.parametrize("family_record", FAMILIES, ids=NAMES)
def test_each_family_has_frontier_sizes_growing_in_parameters_over_4x(family_record):
    """The sizes a frontier trains (``sizes: [w32, w64, w128]``, or up to w256): every
    family has them, each larger than the one before, any three in a row over 4x apart
    in parameters, with an 8,000-piece joint vocabulary as the frontier config has."""
    tags = {"en": SRC_TAG, "de": TGT_TAG}
    counts = [parameter_counts(family_record.build(family_record.resolve(size, {}), 8000, 8000, tags, PAD))
              for size in FRONTIER_SIZES]
    totals = [count["total"] for count in counts]
    assert totals == sorted(totals) and all(larger > 4 * smaller for smaller, larger in zip(totals, totals[2:]))
    non_embedding = [count["non_embedding"] for count in counts]
    assert all(3 < larger / smaller < 5 for smaller, larger in zip(non_embedding, non_embedding[1:]))


@pytest.mark.parametrize("family_record", FAMILIES, ids=NAMES)
def test_the_isoflop_study_s_sizes_vary_non_embedding_parameters_over_16x(family_record):
    """configs/multi30k_frontier.yaml's sizes (w8 to w64) with its 1,000-piece joint
    vocabulary: non-embedding parameters (what the sizes scale) grow with every size and
    span at least 16x, so a budget's window of sizes brackets its optimum in what scales."""
    from pipeline.config import load_config
    from tests.helpers import REPO

    config = load_config(REPO / "configs" / "multi30k_frontier.yaml")
    (model,) = [model for model in config.models if model.family == family_record.name]
    vocab = config.bpe.vocab_size
    tags = {"en": SRC_TAG, "de": TGT_TAG}
    counts = [parameter_counts(family_record.build(family_record.resolve(size, model.settings), vocab, vocab, tags,
                                                   PAD))["non_embedding"] for size in model.sizes]
    assert counts == sorted(counts) and counts[-1] >= 16 * counts[0]


def test_preset_overrides_are_validated():
    assert family("transformer").resolve("base", {"pre_norm": True}).pre_norm is True
    with pytest.raises(ValueError, match="unknown transformer preset 'huge'"):
        family("transformer").resolve("huge", {})
    with pytest.raises(ValueError, match="unknown rnn setting.*hiden"):
        family("rnn").resolve("tiny", {"hiden": 3})


def test_decoder_only_loss_adds_the_weighted_source_loss_until_it_decays():
    from stages.shared.models.loss import translation_loss

    model = DecoderOnlyTranslator(replace(DECODER_ONLY_PRESETS["tiny"], ae_alpha=0.5, ae_steps=10),
                                  VOCAB, SRC_TAG, TGT_TAG).eval()
    src, tgt_in = batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((3, 1), EOS)], dim=1)
    with torch.no_grad():
        src_logits, tgt_logits = model.forward_all(src, tgt_in)
        mt_loss, mt_nll = label_smoothed_cross_entropy(tgt_logits, tgt_out)
        ae_loss, _ = label_smoothed_cross_entropy(src_logits, src)
        at_start, nll = translation_loss(model, src, tgt_in, tgt_out, step=0)
        halfway, _ = translation_loss(model, src, tgt_in, tgt_out, step=5)
        after, _ = translation_loss(model, src, tgt_in, tgt_out, step=10)
    assert torch.isclose(at_start, mt_loss + ae_loss) and torch.isclose(halfway, mt_loss + 0.75 * ae_loss)
    assert torch.isclose(after, mt_loss)
    assert torch.isclose(nll, mt_nll)  # the reported NLL is the target's alone


def test_source_logits_predict_the_source_tokens_causally():
    model = make("decoder_only")
    src, tgt_in = batch()
    changed = src.clone()
    changed[:, 5:] = 7
    with torch.no_grad():
        before, after = model.forward_all(src, tgt_in)[0], model.forward_all(changed, tgt_in)[0]
    # Position i predicts source token i from the tag and tokens before it.
    assert torch.allclose(before[:, :6], after[:, :6], atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES, ids=NAMES)
def test_every_family_s_model_implements_the_translation_model_protocol(family):
    from stages.shared.models.build import build_model
    from stages.shared.models.protocol import TranslationModel

    model = build_model(family.name, "tiny", {}, VOCAB, VOCAB, (SRC_TAG, TGT_TAG))
    assert isinstance(model, TranslationModel) and model.family == family.name


def test_an_odd_width_s_sinusoid_table_ends_on_a_sine():
    """The w3 presets: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos at 10000^(-2i/d), the last
    column of an odd width a sine without its cosine (an even width's layout unchanged)."""
    from stages.shared.models.layers import sinusoidal_table

    position = torch.arange(50, dtype=torch.float32)
    odd = sinusoidal_table(50, 3)
    assert odd.shape == (50, 3)
    assert torch.allclose(odd[:, 0], torch.sin(position)) and torch.allclose(odd[:, 1], torch.cos(position))
    assert torch.allclose(odd[:, 2], torch.sin(position * 10000 ** (-2 / 3)), atol=1e-6)
    assert torch.allclose(sinusoidal_table(50, 4)[:, 3], torch.cos(position * 10000 ** (-2 / 4)), atol=1e-6)
