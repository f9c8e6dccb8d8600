"""The decoder-only translator of Wang et al. (2021), "Language models are good
translators": one causal stack over ``<src-lang> source <tgt-lang> target``
(``model.py``), its presets and source-reconstruction schedule (``config.py``), its
counted FLOPs (``flops.py``) and parameters (``parameters.py``), its loss (``loss.py``)
and its CTranslate2 converter (``ctranslate2.py``)."""

from __future__ import annotations

from stages.shared.models.decoder_only import flops, parameters
from stages.shared.models.decoder_only.config import PRESETS, DecoderOnlyConfig, ae_weight
from stages.shared.models.family import Ctranslate2Export, ModelFamily


def build(config: DecoderOnlyConfig, src_vocab: int, tgt_vocab: int, language_tag_ids: tuple[int, int],
          pad_id: int):
    from stages.shared.models.decoder_only.model import DecoderOnlyTranslator

    return DecoderOnlyTranslator(config, src_vocab, *language_tag_ids, pad_id=pad_id)


def predicts_source(model, step: int) -> bool:
    """While its reconstruction loss weighs something."""
    return ae_weight(step, model.config) > 0


def source_loss_schedule(model, settings: dict) -> tuple[str, float] | None:
    """How long its reconstruction loss lasts: ``("fraction", ae_fraction)`` of the run
    (from the unresolved ``settings``) or ``("steps", ae_steps)``; None without one."""
    if not model.config.ae_loss or model.config.prefix_attention:
        return None
    if settings.get("ae_fraction") is not None:
        return "fraction", settings["ae_fraction"]
    return "steps", model.config.ae_steps


def loss(*args):
    from stages.shared.models.decoder_only.loss import reconstruction_loss

    return reconstruction_loss(*args)


def attention_modules(model) -> list:
    """Each block's self-attention over the whole sequence."""
    return [("self-attention", i, block.attention) for i, block in enumerate(model.blocks)]


def ctranslate2_spec(*args):
    from stages.shared.models.decoder_only.ctranslate2 import spec

    return spec(*args)


def ctranslate2_refuses(model) -> str | None:
    from stages.shared.models.decoder_only.ctranslate2 import refuses

    return refuses(model)


FAMILY = ModelFamily(
    name="decoder_only", config=DecoderOnlyConfig, presets=PRESETS, build=build,
    parameter_layout=parameters.parameter_layout,
    forward_flops=flops.forward_flops, plot_marker="^", joint_vocabulary=True, one_stack=True,
    predicts_source=predicts_source, source_loss_schedule=source_loss_schedule, loss=loss, attention_modules=attention_modules,
    ctranslate2=Ctranslate2Export(engine="generator", spec=ctranslate2_spec, refuses=ctranslate2_refuses),
)
