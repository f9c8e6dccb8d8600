"""The pipeline's stages: each a plain function from upstream artifacts and its config
slice to one artifact directory. They know nothing of Ray, MLflow or the CLI; the
runner in ``pipeline/`` hands them a ``StageContext`` for parallel work and progress."""
