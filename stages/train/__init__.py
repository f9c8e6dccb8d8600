"""Training: the three model families (``models/``), their loss and FLOPs counts."""
