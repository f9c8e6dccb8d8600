"""A model's parameters counted from its config, without building it (torch-free): what
``nmt inspect`` prints and the 6ND estimate reads, in the time a config takes to load.

Each family's ``parameters.py`` lays its modules out with the helpers below;
tests/unit/stages/shared/models/test_parameter_layout.py checks every layout against the
parameters of the built model, preset by preset.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParameterLayout:
    """Parameters by where they sit. ``embedding``: the token and learned position
    tables. ``encoder``: the rest of what is applied to source tokens (the encoder, and
    the RNN's bridge from it). ``output``: the output projection, tied or not, of which
    ``output_tied`` parameters are also an embedding table. ``decoder``: everything
    else. Tied matrices count once in ``total``."""

    embedding: int
    encoder: int
    decoder: int
    output: int
    output_tied: int = 0

    @property
    def total(self) -> int:
        return self.embedding + self.encoder + self.decoder + self.output - self.output_tied

    def counts(self) -> dict[str, int]:
        """Total, embedding and non-embedding: a tied output projection is embedding."""
        return {"total": self.total, "embedding": self.embedding, "non_embedding": self.total - self.embedding}

    def sides(self) -> dict[str, int]:
        """By the tokens they are applied to (stages/shared/models/flops.py's 6ND)."""
        return {"encoder": self.encoder, "decoder": self.decoder, "output": self.output}


def linear(inputs: int, outputs: int, bias: bool = True) -> int:
    return inputs * outputs + (outputs if bias else 0)


def layer_norm(width: int) -> int:
    return 2 * width  # gain and bias


def attention(width: int) -> int:
    """stages/shared/models/layers.py's MultiHeadAttention: query, key, value, out."""
    return 4 * linear(width, width)


def feed_forward(width: int, inner: int) -> int:
    return linear(width, inner) + linear(inner, width)


def positions(rows: int, width: int, learned: bool) -> int:
    """A learned position table's parameters (sinusoids have none)."""
    return rows * width if learned else 0
