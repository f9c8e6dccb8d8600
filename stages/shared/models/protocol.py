"""The interface every family's model implements, which training, beam search,
validation BLEU and the translator are written against.

A model is also an ``nn.Module`` (parameters, ``eval``, ``to``); this protocol names what
the pipeline calls beyond that. ``runtime_checkable``: ``isinstance(model,
TranslationModel)`` checks that the methods exist (tests/unit/stages/shared/models).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class TranslationModel(Protocol):
    family: str  # the name of its record in stages/shared/models/families.py
    config: Any  # its family's config dataclass

    def __call__(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for padded ``src`` (B, S) and ``tgt_in`` (B, T):
        BOS and the target but its last token."""
        ...

    def start_decoding(self, src: Tensor) -> Any:
        """The decoding state of ``src``: the source encoded once, one row a sentence."""
        ...

    def decode_step(self, state: Any, tokens: Tensor) -> tuple[Tensor, Any]:
        """Log-probabilities (rows, V) of the next token after ``tokens`` (rows,), one
        row a hypothesis, and the state that includes them."""
        ...

    def reorder_state(self, state: Any, order: Tensor, sentences: Tensor | None = None) -> Any:
        """Rows ``order`` of the state: the hypotheses that go on. ``sentences``: which
        sentences the rows belong to, in order, so that a family may keep what all of
        a sentence's beams share once per sentence."""
        ...
