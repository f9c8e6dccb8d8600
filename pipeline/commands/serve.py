"""``nmt serve``: a trained model behind an HTTP JSON API on Ray Serve, until stopped."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from pipeline.commands.output import console, fail


def serve_model(model: Path, model_name: str | None, host: str, port: int, replicas: int, cpus_per_replica: float,
                gpus_per_replica: float, settings, address: str | None, artifact_root: str | None) -> None:
    from ray import serve

    from pipeline.context import LocalPath
    from pipeline.commands.translate import TrainedModel, trained_artifact
    from pipeline.runner import connect_ray
    from pipeline.serving.app import service_app

    if model.suffix in (".yaml", ".yml"):
        fetch_model, name = TrainedModel(*trained_artifact(model, model_name, artifact_root)), model_name
    else:
        if not model.exists():
            fail(f"{model}: no such model file or train artifact directory", 2)
        path = model.resolve()
        fetch_model, name = LocalPath(path), model_name or "/".join(path.parts[-2:])
    try:
        app = service_app(fetch_model, name, settings, replicas, cpus_per_replica, gpus_per_replica)
    except ValueError as error:
        fail(str(error), 2)

    connect_ray(address)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name="nmt", route_prefix="/")
    console.print(f"serving {name} ({settings.backend}, {replicas} replica(s)) at http://{host}:{port}: "
                  f"POST /translate, GET /health, /docs; Ctrl-C stops")
    print(f"ready http://{host}:{port}", flush=True)  # a line scripts and tests wait for

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
