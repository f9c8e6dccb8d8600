"""Decoding FLOPs: the source's work once, the target's once per hypothesis."""

from __future__ import annotations

import pytest

from stages.shared.models.flops import decoding_flops, forward_flops
from stages.shared.models.build import build_model


@pytest.mark.parametrize("family", ["transformer", "decoder_only", "rnn"])
def test_greedy_decoding_costs_one_forward_pass_and_each_hypothesis_adds_the_target_part(family):
    model = build_model(family, "tiny", {}, 500, 500)
    greedy = decoding_flops(model, 12, 15, beam_size=1)
    if family == "decoder_only":
        # The prompt (source tag + 12 source tokens) is read, never projected onto the vocabulary.
        assert greedy == forward_flops(model, 12, 15) - 2 * 13 * model.config.d_model * 500
    else:
        assert greedy == forward_flops(model, 12, 15)
    target_part = forward_flops(model, 12, 15) - forward_flops(model, 12, 0)
    assert 0 < target_part < greedy
    assert decoding_flops(model, 12, 15, beam_size=4) == greedy + 3 * target_part


@pytest.mark.parametrize("family", ["transformer", "decoder_only", "rnn"])
def test_6nd_counts_each_side_on_its_own_tokens_and_the_output_projection_tied_or_not(family):
    from stages.shared.models.flops import parameter_counts, parameter_sides, six_nd

    model = build_model(family, "tiny", {}, 500, 500)
    sides, counts = parameter_sides(model), parameter_counts(model)
    output = model.output.weight.numel()
    tied = any(model.output.weight is m.weight for m in model.modules() if m is not model.output
               and hasattr(m, "weight") and m.weight is not None)
    # Every non-embedding parameter on exactly one side; a tied output projection added.
    assert sum(sides.values()) == counts["non_embedding"] + (output if tied else 0)
    assert sides["output"] >= output
    assert (sides["encoder"] == 0) == (family == "decoder_only")
    source, target = 1000, 2000
    if family == "decoder_only":  # one stack over both, every position projected
        expected = 6 * (sides["decoder"] + sides["output"]) * (source + target)
    else:
        expected = 6 * (sides["encoder"] * source + (sides["decoder"] + sides["output"]) * target)
    assert six_nd(model, source, target) == expected
    # Within a fifth of what the layer shapes count at Multi30k's mean lengths (the rest
    # is attention scores and recurrences), where 6 x non-embedding x (source + target)
    # tokens had been 0.2 to 2 times it.
    model = build_model(family, "tiny", {}, 8000, 8000)
    assert 0.8 < six_nd(model, 15, 16) / (3 * forward_flops(model, 15, 16)) < 1.2


def test_once_the_reconstruction_loss_ends_the_source_is_neither_projected_nor_counted():
    import torch

    from stages.shared.models.flops import projects_source, training_flops
    from stages.shared.models.loss import translation_loss

    model = build_model("decoder_only", "tiny", {"ae_steps": 5, "dropout": 0.0}, 50, 50)
    model.eval()
    d, vocab = model.config.d_model, model.output.out_features
    assert training_flops(model, 12, 15) - training_flops(model, 12, 15, source_logits=False) \
        == 3 * 2 * 13 * d * vocab  # the source tag and 12 source positions, 3 x forward
    assert projects_source(model, 4) and not projects_source(model, 5)
    assert not projects_source(build_model("transformer", "tiny", {}, 50, 50), 0)
    torch.manual_seed(0)
    src, tgt = torch.randint(4, 50, (3, 12)), torch.randint(4, 50, (3, 16))
    none, target_only = model.forward_all(src, tgt, source_logits=False)
    assert none is None and torch.allclose(target_only, model.forward_all(src, tgt)[1], atol=1e-5)
    # After step 5 the loss is L_MT alone, as before, without the source's logits.
    late, late_nll = translation_loss(model, src, tgt[:, :-1], tgt[:, 1:], step=5)
    full = model.forward_all(src, tgt[:, :-1])[1]
    from stages.shared.models.cross_entropy import label_smoothed_cross_entropy

    expected, _ = label_smoothed_cross_entropy(full, tgt[:, 1:], 0.1, 0)
    assert torch.allclose(late, expected, atol=1e-4)
