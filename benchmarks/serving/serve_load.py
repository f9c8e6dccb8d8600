"""Load on ``nmt serve`` over loopback: requests/s and p50/p99 latency at 1, 8 and 32
concurrent clients, against the offline batched throughput of the same backend.

Offline first: the replica's own backend (``pipeline/serving/backends.py``) decodes the
sentences in batches of ``--max-batch-sentences`` in this process, with the replica's
thread count, the server not yet started. Then a real ``nmt serve`` process (one
replica, one CPU) takes the load: each client sends its requests one after another,
``--sentences-per-request`` sentences each, from its own thread. The service's
sentences/s at each concurrency is set against the offline figure: dynamic batching is
what lets concurrent single-sentence requests approach it. Two more columns say where
a shortfall comes from: the replica's mean batch (its ``/stats``) with the offline rate
at a batch of that many clients, the most that batching their requests could reach;
and how busy the decoder was (a low figure means requests reach it too slowly).

    python benchmarks/serving/serve_load.py MODEL_DIR --sources src.txt
    python benchmarks/serving/serve_load.py MODEL_DIR --sources src.txt --backend ctranslate2
    python benchmarks/serving/serve_load.py MODEL_DIR --sources src.txt --ingress haproxy
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import requests
import torch

from pipeline.serving.backends import open_backend
from stages.shared.inference.model_file import ModelFiles, SourceEncoder
from stages.shared.inference.search import SearchSettings


def offline_rate(model: Path, backend: str, lines: list[str], beam: int, batch: int, threads: int) -> float:
    torch.set_num_threads(threads)  # as a replica's decode process does
    engine = open_backend(model, backend, "cpu", threads)
    search = SearchSettings(beam_size=beam)
    sources = SourceEncoder.of(ModelFiles.find(model)).encode(lines)
    engine.translate_batch(sources[:batch], search)  # warm-up
    started = time.perf_counter()
    for start in range(0, len(sources), batch):
        engine.translate_batch(sources[start:start + batch], search)
    return len(lines) / (time.perf_counter() - started)


def start_service(model: Path, backend: str, batch: int, wait_ms: float,
                  max_wait_ms: float | None, ingress: str, gpus_per_replica: float = 0.0,
                  extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """``nmt serve`` for ``model`` on a free port, once it has printed its "ready" line;
    ``extra``: more of its options."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Kept, not shown: Ray's start-up chatter would bury the tables; shown if it fails.
    errors = tempfile.TemporaryFile()
    process = subprocess.Popen([sys.executable, "-m", "pipeline", "serve", str(model), "--port", str(port),
                                "--backend", backend, "--max-batch-sentences", str(batch),
                                "--max-sentences", str(batch), "--batch-wait-ms", str(wait_ms),
                                "--ingress", ingress, "--gpus-per-replica", str(gpus_per_replica),
                                *(["--batch-max-wait-ms", str(max_wait_ms)] if max_wait_ms is not None else []),
                                *extra],
                               stdout=subprocess.PIPE, stderr=errors, text=True)
    for line in process.stdout:
        if line.startswith("ready"):
            return process, f"http://127.0.0.1:{port}"
    process.wait()
    errors.seek(0)
    said = errors.read().decode(errors="replace").strip().splitlines()[-40:]
    raise SystemExit(f"nmt serve ended before it was ready (exit {process.returncode}); "
                     "the end of what it wrote:\n" + "\n".join(said))


@contextmanager
def running_service(model: Path, backend: str = "ours", batch: int = 64, wait_ms: float = 10.0,
                    max_wait_ms: float | None = None, ingress: str = "ray", gpus_per_replica: float = 0.0,
                    extra: tuple[str, ...] = ()) -> Iterator[str]:
    """``start_service``'s URL while the block runs; then the service stopped as a user
    stops it, with Ctrl-C (it shuts Ray Serve and its Ray instance down), killed if that
    takes over a minute. The defaults are ``nmt serve``'s own batching: 64 sentences, 10 ms."""
    process, url = start_service(model, backend, batch, wait_ms, max_wait_ms, ingress, gpus_per_replica, extra)
    try:
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def replica_stats(url: str) -> dict:
    return requests.get(f"{url}/stats", timeout=30).json()


def load(url: str, lines: list[str], clients: int, requests_per_client: int, per_request: int,
         beam: int) -> tuple[float, list[float]]:
    """(wall seconds, per-request latencies) of ``clients`` clients sending their requests."""
    def client(index: int) -> list[float]:
        session, latencies = requests.Session(), []
        for r in range(requests_per_client):
            start = (index * requests_per_client + r) * per_request % len(lines)
            body = {"sentences": (lines + lines)[start:start + per_request], "beam_size": beam}
            sent = time.perf_counter()
            response = session.post(f"{url}/translate", json=body, timeout=600)
            latencies.append(time.perf_counter() - sent)
            response.raise_for_status()
        return latencies

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = [latency for result in pool.map(client, range(clients)) for latency in result]
    return time.perf_counter() - started, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a train artifact directory or model file")
    parser.add_argument("--sources", type=Path, required=True)
    parser.add_argument("--backend", choices=["ours", "ctranslate2"], default="ours")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=0,
                        help="default: enough for 256 sentences at each concurrency (at least 8 a client)")
    parser.add_argument("--sentences-per-request", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--max-batch-sentences", type=int, default=64)
    parser.add_argument("--batch-wait-ms", type=float, default=10.0)
    parser.add_argument("--batch-max-wait-ms", type=float, default=None)
    parser.add_argument("--ingress", choices=["ray", "haproxy"], default="ray", help="nmt serve --ingress")
    args = parser.parse_args()
    lines = [line for line in args.sources.read_text().splitlines() if line.strip()]

    offline = offline_rate(args.model, args.backend, lines[:256], args.beam, args.max_batch_sentences, 1)
    # The most that batching c single-sentence clients could give: batches of c, on the
    # same 256 sentences (shorter ones decode faster: a subset would not compare).
    offline_at_batch = {clients: offline_rate(args.model, args.backend, lines[:256], args.beam,
                                              min(clients * args.sentences_per_request, args.max_batch_sentences), 1)
                        for clients in args.clients}
    with running_service(args.model, args.backend, args.max_batch_sentences, args.batch_wait_ms,
                         args.batch_max_wait_ms, args.ingress) as url:
        load(url, lines, 2, 2, args.sentences_per_request, args.beam)  # warm-up
        print(f"{args.backend} backend, beam {args.beam}, {args.sentences_per_request} sentence(s) a request, "
              f"one replica with 1 CPU, {args.ingress} ingress; offline batched: {offline:.1f} sentences/s\n")
        print("| clients | requests | requests/s | sentences/s | p50 ms | p99 ms | of offline | mean batch | "
              "offline at batch = clients | decoder busy |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for clients in args.clients:
            per_client = args.requests_per_client or max(8, 256 // (clients * args.sentences_per_request))
            before = replica_stats(url)
            seconds, latencies = load(url, lines, clients, per_client, args.sentences_per_request, args.beam)
            after = replica_stats(url)
            rate = len(latencies) / seconds
            p50, p99 = statistics.quantiles(latencies, n=100)[49], statistics.quantiles(latencies, n=100)[98]
            sentences = rate * args.sentences_per_request
            mean_batch = (after["sentences"] - before["sentences"]) / max(1, after["batches"] - before["batches"])
            busy = (after["decode_seconds"] - before["decode_seconds"]) / seconds
            print(f"| {clients} | {len(latencies)} | {rate:.1f} | {sentences:.1f} | {p50 * 1000:.0f} | "
                  f"{p99 * 1000:.0f} | {sentences / offline:.0%} | {mean_batch:.1f} | "
                  f"{offline_at_batch[clients]:.1f} | {busy:.0%} |", flush=True)


if __name__ == "__main__":
    main()
