"""The convolutional sequence-to-sequence model of Gehring et al. (2017): gated
convolutions over both sides, an attention step in every decoder block, learned
position embeddings (``model.py``), its presets (``config.py``) and its counted FLOPs
(``flops.py``) and parameters (``parameters.py``). CTranslate2 has no converter for it, so ``nmt export`` refuses it."""

from __future__ import annotations

from stages.shared.models.convs2s import flops, parameters
from stages.shared.models.convs2s.config import PRESETS, ConvS2SConfig
from stages.shared.models.family import ModelFamily


def build(config: ConvS2SConfig, src_vocab: int, tgt_vocab: int, language_tag_ids: tuple[int, int], pad_id: int):
    from stages.shared.models.convs2s.model import ConvS2STranslator

    return ConvS2STranslator(config, src_vocab, tgt_vocab, pad_id)


def attention_modules(model) -> list:
    """Each decoder block's attention over the source."""
    return [("cross-attention", i, attention) for i, attention in enumerate(model.attentions)]


FAMILY = ModelFamily(
    name="convs2s", config=ConvS2SConfig, presets=PRESETS, build=build, parameter_layout=parameters.parameter_layout,
    forward_flops=flops.forward_flops,
    plot_marker="D", attention_modules=attention_modules,
    # Measured: benchmarks/training/compile_cost.py --families convs2s (8 compilations in 60 updates).
    compile_refused="inductor compiles a 1-d convolution's backward for one sequence length (torch 2.13: "
                    "convolution_backward_lowering), so every new batch length compiles the model again",
)
