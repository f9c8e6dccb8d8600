"""Starts ``nmt serve`` for one trained model (``serve_load.running_service``), POSTs a few
sentences to /translate, prints the answer and stops the service: the serving step of
benchmarks/gpu_check.sh. Exits non-zero when the service does not come up or does not
translate every sentence.

    python benchmarks/serving/serve_probe.py TRAIN_ARTIFACT_DIR [--gpus-per-replica 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import requests

from benchmarks.serving.serve_load import running_service

SENTENCES = ["A dog runs on the beach.", "Two men are playing soccer in a park.", "A woman reads a book."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a train artifact directory (or model file)")
    parser.add_argument("--gpus-per-replica", type=float, default=0.0)
    args = parser.parse_args()
    started = time.monotonic()
    with running_service(args.model, gpus_per_replica=args.gpus_per_replica) as url:
        up = time.monotonic() - started
        health = requests.get(f"{url}/health", timeout=30).json()
        asked = time.monotonic()
        answer = requests.post(f"{url}/translate", json={"sentences": SENTENCES, "beam_size": 4}, timeout=120)
        answer.raise_for_status()
        texts = [item["text"] for item in answer.json()["translations"]]
        print(json.dumps({"ready_seconds": round(up, 1), "health": health,
                          "request_seconds": round(time.monotonic() - asked, 3), "translations": texts}, indent=1))
        if len(texts) != len(SENTENCES) or not all(texts):
            print("serve probe: not every sentence was translated")
            return 1
        return 0

if __name__ == "__main__":
    sys.exit(main())
