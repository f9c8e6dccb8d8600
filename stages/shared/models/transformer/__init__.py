"""The Transformer of Vaswani et al. (2017), "Attention is all you need": an encoder and
a decoder stack with cross-attention (``model.py``), its presets (``config.py``), its
counted FLOPs (``flops.py``) and parameters (``parameters.py``), and its CTranslate2
converter (``ctranslate2.py``)."""

from __future__ import annotations

from stages.shared.models.family import Ctranslate2Export, ModelFamily
from stages.shared.models.transformer import flops, parameters
from stages.shared.models.transformer.config import PRESETS, TransformerConfig


def build(config: TransformerConfig, src_vocab: int, tgt_vocab: int, language_tag_ids: tuple[int, int],
          pad_id: int):
    from stages.shared.models.transformer.model import Transformer

    return Transformer(config, src_vocab, tgt_vocab, pad_id)


def attention_modules(model) -> list:
    """Each layer's encoder self-attention, decoder self-attention and cross-attention."""
    return ([("encoder self-attention", i, layer.attention) for i, layer in enumerate(model.encoder)]
            + [(kind, i, getattr(layer, name)) for i, layer in enumerate(model.decoder)
               for kind, name in (("decoder self-attention", "self_attention"), ("cross-attention", "cross_attention"))])


def ctranslate2_spec(*args):
    from stages.shared.models.transformer.ctranslate2 import spec

    return spec(*args)


FAMILY = ModelFamily(
    name="transformer", config=TransformerConfig, presets=PRESETS, build=build,
    parameter_layout=parameters.parameter_layout,
    forward_flops=flops.forward_flops, plot_marker="o", attention_modules=attention_modules,
    ctranslate2=Ctranslate2Export(engine="translator", spec=ctranslate2_spec), marian=True,
)
