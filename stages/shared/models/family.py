"""What the pipeline knows of a model family: one record per family, which the family's
folder (``stages/shared/models/<family>/``) exports as ``FAMILY`` and ``families.py`` lists.

Everything outside the folder that differs by family reads it from this record, never
from the family's name: building a model, its presets, its counted FLOPs, its loss, the
attention it shows, its CTranslate2 export. Torch-free: the record's callables import
torch only when they are called, so that configs validate without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Ctranslate2Export:
    """How CTranslate2 runs a family: ``engine`` is ``"translator"`` (an encoder-decoder:
    ``ctranslate2.Translator``) or ``"generator"`` (a decoder continuing a prompt:
    ``ctranslate2.Generator``); ``spec(model, src_pieces, tgt_pieces, special_ids)`` fills
    a CTranslate2 model spec from the trained weights; ``refuses(model)`` says why a
    model of the family cannot be converted (a setting CTranslate2 lacks), or None."""

    engine: str
    spec: Callable[..., Any]
    refuses: Callable[[Any], str | None] = lambda model: None


@dataclass(frozen=True)
class ModelFamily:
    """One model family.

    ``build(config, src_vocab, tgt_vocab, language_tag_ids, pad_id)`` makes the model
    (an ``nn.Module`` with the decoding interface of ``stages/shared/models/__init__.py``).
    ``parameter_layout(config, src_vocab, tgt_vocab)`` counts its parameters from its config,
    without building it (``stages/shared/models/parameter_layout.py``).
    ``forward_flops(model, src_len, tgt_len, source_logits)`` counts one teacher-forced
    forward pass over a sentence pair (``stages/shared/models/flops.py`` says what is counted);
    ``source_logits`` matters only to a family whose training also predicts the source,
    which ``predicts_source(model, step)`` says for each update. ``loss(model, src,
    tgt_in, tgt_out, step, epsilon, pad_id)`` replaces the shared label-smoothed
    cross-entropy on the target where a family trains on more (None: the shared one).
    ``attention_modules(model)`` lists ``(kind, layer, module)`` for every attention
    module whose weights ``nmt attention`` shows; each module has
    ``weights_of_call(args, kwargs)``: the (B, heads, queries, keys) weights of the forward
    call it was given (stages/shared/inference/attention.py names the kinds).
    """

    name: str
    config: type  # a frozen dataclass of the family's hyperparameters
    presets: Mapping[str, Any]  # named sizes: a paper's, cited in the config's docstring, and CPU ones
    build: Callable[..., Any]
    parameter_layout: Callable[..., Any]
    forward_flops: Callable[..., int]
    plot_marker: str  # matplotlib marker of the family in the report's plots
    joint_vocabulary: bool = False  # needs one vocabulary for both languages (bpe.joint: true)
    # One stack reads the source and the target (a decoder-only model): all its parameters
    # see both sides' tokens (the 6ND estimate of stages/shared/models/flops.py).
    one_stack: bool = False
    predicts_source: Callable[[Any, int], bool] | None = None
    # For such a family, ``source_loss_schedule(model, settings)``: how long the updates
    # that predict the source last, as ``("fraction", share of the run)`` or ``("steps",
    # updates)`` (None: this model never predicts it), which a run's plan prices in.
    source_loss_schedule: Callable[[Any, dict], tuple[str, float] | None] | None = None
    loss: Callable[..., Any] | None = None
    attention_modules: Callable[[Any], list] = lambda model: []
    ctranslate2: Ctranslate2Export | None = None
    marian: bool = False  # Hugging Face's MarianMTModel can hold it (export --format huggingface)
    # Why train.compile is refused for the family (None: it compiles once for every batch
    # shape, stages/train/engine.py): what torch.compile cannot do with its layers.
    compile_refused: str | None = None

    def check_vocabularies(self, src_vocab: int, tgt_vocab: int) -> None:
        """ValueError where the family needs one vocabulary and the sides have two."""
        if self.joint_vocabulary and src_vocab != tgt_vocab:
            raise ValueError(f"the {self.name} family needs a joint vocabulary (bpe.joint: true)")

    def resolve(self, preset: str, overrides: Mapping[str, Any]):
        """The preset's config with ``overrides`` applied; ValueError names a bad preset or key."""
        if preset not in self.presets:
            raise ValueError(f"unknown {self.name} preset {preset!r}; presets are: {', '.join(self.presets)}")
        base = self.presets[preset]
        valid = {field.name for field in fields(base)}
        unknown = sorted(set(overrides) - valid)
        if unknown:
            raise ValueError(f"unknown {self.name} setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        return replace(base, **overrides)
