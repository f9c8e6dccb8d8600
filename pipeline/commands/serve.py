"""``nmt serve``: a trained model behind an HTTP JSON API on Ray Serve, until stopped."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

from pipeline.commands.output import console, fail

INGRESSES = ("ray", "haproxy")
# Ray Serve's switch from its Python HTTP proxy to HAProxy; its controller reads it at start.
HAPROXY_SWITCH = "RAY_SERVE_ENABLE_HA_PROXY"


def choose_ingress(ingress: str, address: str | None) -> None:
    """Where HTTP requests come in. ``ray``: Ray Serve's HTTP proxy, a Python actor that
    parses each request and forwards it to a replica. ``haproxy``: Ray Serve's HAProxy
    ingress (Ray 2.60's feature flag), which forwards requests to the replicas in C; on a
    2-core box it served about 17% more one-sentence requests a second at 32 clients
    (benchmarks/serve_load.py --ingress). Call before Ray starts: the local instance's
    Serve controller takes the switch from this process's environment."""
    if ingress not in INGRESSES:
        fail(f"--ingress {ingress}: choose {' or '.join(INGRESSES)}", 2)
    if ingress != "haproxy":
        return
    if shutil.which("haproxy") is None:
        fail("--ingress haproxy: no haproxy binary on PATH (Debian: apt-get install haproxy)", 2)
    if (address or os.environ.get("RAY_ADDRESS")) and os.environ.get(HAPROXY_SWITCH) != "1":
        fail(f"--ingress haproxy on a running cluster: start its nodes with {HAPROXY_SWITCH}=1 in their "
             "environment (ray start reads it), and set it here too", 2)
    os.environ[HAPROXY_SWITCH] = "1"


def serve_model(model: Path, model_name: str | None, host: str, port: int, replicas: int, cpus_per_replica: float,
                gpus_per_replica: float, settings, address: str | None, artifact_root: str | None) -> None:
    from ray import serve

    from pipeline.commands.translate import TrainedModel, trained_artifact
    from pipeline.context import LocalPath
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
