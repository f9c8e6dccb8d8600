"""The model families, each a folder with its record (``family.py``), listed in
``families.py``; every family's model implements ``protocol.TranslationModel``:

- ``model(src, tgt_in) -> logits (B, T, V)``: the teacher-forced forward;
- ``model.start_decoding(src) -> state``: encode the source once;
- ``model.decode_step(state, tokens) -> (log_probs (B, V), state)``: one incremental step;
- ``model.reorder_state(state, order, sentences=None) -> state``: follow the beams that
  survived: rows ``order`` of the state, which belong to its sentences ``sentences``
  (a family may keep what all beams of a sentence share once per sentence).

``build_model`` (``build.py``) makes one from a config's family, preset and settings;
``spec.py`` is the torch-free ``ModelSpec`` a config names a model with.
"""
