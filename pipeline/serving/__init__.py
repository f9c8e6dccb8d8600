"""nmt serve: a trained model behind an HTTP JSON API on Ray Serve (``app.py``), decoding with our beam search or CTranslate2 (``backends.py``)."""
