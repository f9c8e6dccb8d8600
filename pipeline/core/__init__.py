"""The core beneath the stages: config sections, what the runner hands a stage, the
artifact store with its object stores and leases, the hardware and its peak FLOP/s.

Stages import these modules and nothing else of ``pipeline/``; these import nothing of
the stages or of the orchestration above them (graph, runner, commands, serving), as
tests/unit/test_import_structure.py checks."""
