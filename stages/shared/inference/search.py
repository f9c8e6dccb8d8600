"""How to search for translations: the one definition of the search settings.

The evaluate stage's config extends it, ``nmt translate`` builds one from its options,
and the translation service's request model extends it (``pipeline/serving/app.py``),
so every default and every check is written here once. Torch-free: the CLI and config
loading import it.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from pipeline.core.hardware import Precision
from pipeline.core.section import Section
from stages.shared.inference.search_defaults import SEARCH_DEFAULTS as DEFAULTS


# Upper bounds of every search setting, so that no request or config can ask for a
# search that never ends: the search's steps and memory grow with the beam and the
# output length. Generous for translation (fairseq's and Marian's defaults sit far below).
MAX_BEAM_SIZE = 64
MAX_LENGTH_A = 10.0
MAX_OUTPUT_TOKENS = 1024  # bounds max_length_b and min_length


def output_room(positions: int | None, source_tokens: int) -> int | None:
    """Output tokens a model with ``positions`` positions has left after a source of
    ``source_tokens`` tokens and its two language tags (a decoder-only model's prompt;
    an encoder-decoder has more, so this is safe for both); None: unbounded (an RNN)."""
    return None if positions is None else max(1, positions - source_tokens - 2)


class SearchSettings(Section):
    """Beam search with GNMT's length penalty (Wu et al. 2016, section 7).

    Defaults (search_defaults.py) are Vaswani et al. (2017), section 6.1: beam 4, length
    penalty alpha 0.6, at most source length + 50 tokens (``max_length_a * |x| +
    max_length_b``). Every number is finite and bounded (``MAX_*`` above); the model's own limit (its
    positions, ``output_room``) is applied where it is loaded (``beam.max_output_lengths``).
    """

    beam_size: int = Field(default=DEFAULTS.beam_size, gt=0, le=MAX_BEAM_SIZE, description="Beam size; 1 is greedy.")
    nbest: int = Field(default=DEFAULTS.nbest, gt=0, description="Hypotheses kept per sentence, best first (at most beam_size).")
    length_penalty: float = Field(default=DEFAULTS.length_penalty, ge=0.0, le=10.0, allow_inf_nan=False,
                                  description="GNMT's alpha (CTranslate2: the exponent of the length).")
    max_length_a: float = Field(default=DEFAULTS.max_length_a, ge=0.0, le=MAX_LENGTH_A, allow_inf_nan=False,
                                description="At most a * source length + b output tokens.")
    max_length_b: int = Field(default=DEFAULTS.max_length_b, gt=0, le=MAX_OUTPUT_TOKENS,
                              description="At most a * source length + b output tokens.")
    # fairseq's default of 1: a weak model's likeliest output is often the empty one.
    min_length: int = Field(default=DEFAULTS.min_length, ge=0, le=MAX_OUTPUT_TOKENS,
                            description="Tokens before EOS may end a hypothesis (below each sentence's maximum).")
    # auto: bf16 where the device runs it natively, else fp32; fp16 on older GPUs
    # (pipeline/core/hardware.py), resolved on the device that decodes. bf16 and fp16 are autocast.
    precision: Precision = Field(default=DEFAULTS.precision, description="Autocast precision.")
    device: str = Field(default=DEFAULTS.device, pattern=r"^(cpu|cuda(:\d+)?)$", description="cpu, cuda, cuda:1, ...")

    @model_validator(mode="after")
    def _consistent(self) -> SearchSettings:
        if self.nbest > self.beam_size:
            raise ValueError(f"nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})")
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            raise ValueError("precision fp16 needs a cuda device; on a CPU use auto, bf16 or fp32")
        return self

    def output_length_limit(self, source_tokens: int, model_limit: int | None = None) -> int:
        """Most tokens (EOS included) a sentence of ``source_tokens`` tokens may produce:
        ``a * |x| + b``, within ``model_limit`` (the positions the model has left)."""
        limit = int(source_tokens * self.max_length_a) + self.max_length_b
        return limit if model_limit is None else max(1, min(limit, model_limit))

    def hypothesis_steps(self, source_lengths: list[int], model_limit_of=lambda length: None) -> int:
        """The most decoder steps a search of these sentences may take over all its
        hypotheses: the beam times each sentence's output limit, summed. What a request
        costs a translation service: its decoding time grows with it (the beam's
        hypotheses advance together, one token a step, until the limit at worst)."""
        return sum(self.beam_size * self.output_length_limit(length, model_limit_of(length))
                   for length in source_lengths)

    def check_min_length(self, source_lengths: list[int], model_limit_of=lambda length: None) -> None:
        """Raises ``ValueError`` naming the first sentence whose longest allowed output is
        not longer than ``min_length``: none of its hypotheses could end on their own."""
        for index, length in enumerate(source_lengths):
            limit = self.output_length_limit(length, model_limit_of(length))
            if self.min_length >= limit:
                raise ValueError(f"min_length ({self.min_length}) must be below the output length allowed for "
                                 f"sentence {index} ({limit} tokens: max_length_a * {length} source tokens + "
                                 f"max_length_b, within the model's positions)")

    def search_settings(self) -> SearchSettings:
        """Just the search settings, of a section that extends them (the evaluate config,
        the service's request): what the translator and the decode pool take."""
        return SearchSettings(**{name: getattr(self, name) for name in SearchSettings.model_fields})


DEFAULT_SEARCH = SearchSettings()
