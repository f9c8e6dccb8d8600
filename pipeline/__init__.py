"""Orchestration: config, artifact store, Ray task graph, MLflow tracking, CLI."""
