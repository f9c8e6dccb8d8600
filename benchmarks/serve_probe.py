"""Starts ``nmt serve`` for one trained model, waits for its "ready" line, POSTs a few
sentences to /translate, prints the answer and stops the service: the serving step
of benchmarks/gpu_check.sh. Exits non-zero when the service does not come up or does
not translate every sentence.

    python benchmarks/serve_probe.py TRAIN_ARTIFACT_DIR [--gpus-per-replica 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import requests

SENTENCES = ["A dog runs on the beach.", "Two men are playing soccer in a park.", "A woman reads a book."]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a train artifact directory (or model file)")
    parser.add_argument("--gpus-per-replica", default="0")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the ready line")
    args = parser.parse_args()
    port = free_port()
    command = [sys.executable, "-m", "pipeline", "serve", args.model, "--port", str(port),
               "--gpus-per-replica", args.gpus_per_replica]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                               start_new_session=True)
    ready = threading.Event()

    def watch() -> None:
        for line in process.stdout:
            print(f"  serve: {line.rstrip()}", flush=True)
            if line.startswith("ready"):
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(args.timeout) or process.poll() is not None:
            print(f"serve probe: nmt serve did not get ready in {args.timeout:.0f} s", flush=True)
            return 1
        up = time.monotonic() - started
        url = f"http://127.0.0.1:{port}"
        health = requests.get(f"{url}/health", timeout=30).json()
        asked = time.monotonic()
        answer = requests.post(f"{url}/translate", json={"sentences": SENTENCES, "beam": 4}, timeout=120)
        answer.raise_for_status()
        body = answer.json()
        print(json.dumps({"ready_seconds": round(up, 1), "health": health,
                          "request_seconds": round(time.monotonic() - asked, 3), "answer": body}, indent=1))
        texts = [item["text"] for item in body["translations"]]
        if len(texts) != len(SENTENCES) or not all(texts):
            print("serve probe: not every sentence was translated", flush=True)
            return 1
        return 0
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
