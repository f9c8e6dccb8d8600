"""The pipeline's stages: each a plain function from upstream artifacts and its config
slice to one artifact directory, called directly in tests. The data, evaluate and
report stages never import Ray or MLflow: the runner in ``pipeline/`` hands them a
``StageContext`` for parallel work (Ray tasks under the runner, a plain loop when
called directly), progress bars and live metrics. The train stage is the exception:
distributed training is its job, so it launches Ray Train itself (which starts a
local Ray instance when none is running)."""
