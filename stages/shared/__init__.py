"""Not stages: what the stages share, and the orchestration uses whole.

``models/`` (one folder per model family, and the list of families), ``inference/``
(search settings, the model file, beam search, the translators, attention maps),
``export/`` (nmt export's formats), ``names.py`` (a model's stage names), ``errors.py``
(InputDataError) and ``pair_files.py`` (the Parquet pairs download and clean write).
They import no stage (tests/unit/test_import_structure.py)."""
