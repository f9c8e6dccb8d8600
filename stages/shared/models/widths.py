"""The widths of every family's compute-frontier presets (``w3`` ... ``w256``).

Half-octave steps from 3 to 128, so that an IsoFLOP profile can place three or more
sizes around its optimum with parameters outside the embeddings about doubling from one
to the next (they grow as the width squared); then 256. ``w3`` is for the smallest
budgets, where a 10-layer decoder-only model's optimum lay below ``w4``. Every family
builds ``w<width>`` at each, at its own fixed depth (docs/models.md)."""

FRONTIER_WIDTHS = (3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)
