"""The pipeline's stages, one package each, all the same shape (``pipeline/stage.py``):
``run``, a plain function from upstream artifacts and its config slice to one artifact
directory, called directly in tests; ``VERSION``; the artifact's readers; and the
stage's config section in ``config.py``.

The data, evaluate and report stages never import Ray or MLflow: the runner in
``pipeline/`` hands them a ``StageContext`` for parallel work (Ray tasks under the
runner, a plain loop when called directly), progress bars and live metrics. The train
stage is the exception: distributed training is its job, so it launches Ray Train
itself (which starts a local Ray instance when none is running)."""
