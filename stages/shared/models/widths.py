"""The widths of every family's compute-frontier presets (``w3`` ... ``w1024``).

Half-octave steps from 3 to 1024, so that an IsoFLOP profile can place three or more
sizes around its optimum with parameters outside the embeddings about doubling from one
to the next (they grow as the width squared). ``w3`` is for the smallest CPU budgets,
where a 10-layer decoder-only model's optimum lay below ``w4``; ``w192`` and up for GPU
budgets of 1e15 FLOPs and more (configs/wmt14_frontier_gpu.yaml). Every family builds
``w<width>`` at each, at its own fixed depth (docs/models.md)."""

FRONTIER_WIDTHS = (3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
