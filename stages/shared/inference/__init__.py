"""Inference: what every part that translates with a trained model shares.

Not a stage: the evaluate stage, the train stage's validation BLEU, ``nmt translate``,
``nmt attention`` and ``nmt serve`` all call it, and it calls none of them.

- ``search.py``: ``SearchSettings``, how to search, defined and checked once;
- ``model_file.py``: the trained model's file (``model.pt``), written by the train
  stage and loaded by everything else, and ``SourceEncoder`` (text to ids + EOS);
- ``beam.py``: beam search over any model family (``stages/shared/models``);
- ``translator.py``: text in, text out, in batches sorted by length;
- ``ctranslate2_translator.py``: the same model exported to CTranslate2 and run by it;
- ``decode_pool.py``: decoding in processes of their own (``nmt translate --workers``,
  each service replica);
- ``attention.py``, ``attention_figures.py``: cross-attention maps and word alignments.
"""
