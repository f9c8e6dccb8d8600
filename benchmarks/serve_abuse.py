"""Does ``nmt serve`` hold when some clients send abusive requests? Well-formed load
alone, then the same load while another client sends every kind of abusive request in
turn: the latency of the well-formed requests in both runs, and what each abusive
request got back, in how long.

The abusive requests are the ones that used to stop or slow the service for everyone:
unbounded or non-finite search settings, a ``min_length`` no output can pass, a body of
64 MB, over-long sentences, malformed JSON, too many sentences. Target: the well-formed
requests' p99 within 2x of the baseline's, every abusive request answered with a 4xx,
and nothing hangs (every request has a timeout, and one that reaches it is counted).

A last phase sends a request that is within every bound but slow (the longest output
the bounds allow, at the widest beam): it must end at the service's batch deadline with
a 503, the service answering ``/health`` with 503 until its decode process is back, and
well-formed requests succeeding again afterwards.

    python -m benchmarks.serve_abuse MODEL_DIR --sources src.txt   # from the repository root
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from benchmarks.serve_load import start_service

TIMEOUT_S = 60.0
SENTENCE = "A dog runs on the beach."
# (what it is, the JSON body as sent: raw text, so that NaN and Infinity go out as such)
ABUSIVE = [
    ("min_length 1e9, max_length_a 1e6, beam 16",
     json.dumps({"sentences": [SENTENCE], "min_length": 1_000_000_000, "max_length_a": 1e6, "beam_size": 16})),
    ("max_length_a NaN", f'{{"sentences": ["{SENTENCE}"], "max_length_a": NaN}}'),
    ("max_length_a Infinity", f'{{"sentences": ["{SENTENCE}"], "max_length_a": Infinity}}'),
    ("max_length_a 1e30", json.dumps({"sentences": [SENTENCE], "max_length_a": 1e30})),
    ("min_length past the allowed output", json.dumps({"sentences": [SENTENCE], "min_length": 100,
                                                       "max_length_b": 50})),
    ("beam 10,000", json.dumps({"sentences": [SENTENCE], "beam_size": 10_000})),
    ("64 sentences of 1 MB", json.dumps({"sentences": ["x" * 1_000_000] * 64})),
    ("a sentence of 100,000 characters", json.dumps({"sentences": ["word " * 20_000]})),
    ("65 sentences", json.dumps({"sentences": [SENTENCE] * 65})),
    ("malformed JSON", '{"sentences": ["a dog"'),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def well_formed_load(url: str, lines: list[str], clients: int, seconds: float) -> dict:
    """``clients`` threads, each sending 2-sentence requests one after another for
    ``seconds``: their latencies, and how many failed or timed out."""
    latencies, failures = [], []
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        k = index
        while time.monotonic() < stop_at:
            batch = [lines[k % len(lines)], lines[(k + 1) % len(lines)]]
            k += clients
            started = time.perf_counter()
            try:
                response = requests.post(f"{url}/translate", json={"sentences": batch, "beam_size": 4},
                                         timeout=TIMEOUT_S)
                ok = response.status_code == 200
            except requests.RequestException as error:
                ok, response = False, error
            (latencies if ok else failures).append(time.perf_counter() - started)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return {"requests": len(latencies) + len(failures), "failed": len(failures),
            "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
            "p99_ms": 1000 * percentile(latencies, 0.99) if latencies else float("nan")}


def send(url: str, body: str) -> tuple[str, float, str]:
    """(status, seconds, the answer's first words) of one raw request."""
    started = time.perf_counter()
    try:
        response = requests.post(f"{url}/translate", data=body, headers={"Content-Type": "application/json"},
                                 timeout=TIMEOUT_S)
        status, text = str(response.status_code), response.text
    except requests.Timeout:
        status, text = "TIMEOUT", ""
    except requests.RequestException as error:
        status, text = "ERROR", str(error)
    return status, time.perf_counter() - started, " ".join(text.split())[:90]


def abuse_until(url: str, stop: threading.Event, answers: dict) -> None:
    """Every abusive request in turn, again and again, until ``stop``; the last answer of each."""
    while not stop.is_set():
        for name, body in ABUSIVE:
            answers.setdefault(name, []).append(send(url, body))
            if stop.is_set():
                return


def slow_within_bounds(url: str, lines: list[str]) -> list[tuple[str, str]]:
    """The deadline phase: what the slow request, /health and a later request got."""
    slow = json.dumps({"sentences": lines[:8], "beam_size": 16, "max_length_a": 10.0, "max_length_b": 1024,
                       "min_length": 900})
    rows = []
    status, seconds, text = send(url, slow)
    rows.append(("slow request (8 sentences, beam 16, 900 tokens at least)",
                 f"{status} after {seconds:.1f} s: {text}"))
    health = requests.get(f"{url}/health", timeout=TIMEOUT_S)
    rows.append(("/health right after", f"{health.status_code}: {' '.join(health.text.split())[:90]}"))
    started, back = time.perf_counter(), None
    while time.perf_counter() - started < 120:
        if requests.get(f"{url}/health", timeout=TIMEOUT_S).status_code == 200:
            back = time.perf_counter() - started
            break
        time.sleep(0.2)
    rows.append(("/health ok again", "never (120 s)" if back is None else f"after {back:.1f} s"))
    status, seconds, _ = send(url, json.dumps({"sentences": lines[:2], "beam_size": 4}))
    rows.append(("well-formed request after it", f"{status} in {seconds:.2f} s"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="A train artifact directory or model file.")
    parser.add_argument("--sources", type=Path, required=True, help="Source sentences, one a line.")
    parser.add_argument("--clients", type=int, default=4, help="Well-formed clients at once.")
    parser.add_argument("--seconds", type=float, default=30.0, help="Length of each load phase.")
    parser.add_argument("--deadline-s", type=float, default=5.0, help="The service's --batch-deadline-s.")
    args = parser.parse_args()
    lines = [line for line in args.sources.read_text(encoding="utf-8").splitlines() if line.strip()][:500]

    process, url = start_service(args.model, "ours", 64, 10.0, None, "ray",
                                 extra=("--batch-deadline-s", str(args.deadline_s)))
    try:
        well_formed_load(url, lines, args.clients, 5)  # warm-up
        baseline = well_formed_load(url, lines, args.clients, args.seconds)
        stop, answers = threading.Event(), {}
        abuser = threading.Thread(target=abuse_until, args=(url, stop, answers))
        abuser.start()
        under_abuse = well_formed_load(url, lines, args.clients, args.seconds)
        stop.set()
        abuser.join()
        deadline_rows = slow_within_bounds(url, lines)
    finally:
        process.terminate()
        process.wait(timeout=60)

    print(f"\nwell-formed load: {args.clients} clients, 2 sentences a request, beam 4, {args.seconds:g} s a phase")
    print("| phase | requests | failed | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|")
    for name, result in (("baseline", baseline), ("with abusive requests", under_abuse)):
        print(f"| {name} | {result['requests']} | {result['failed']} | {result['p50_ms']:.0f} | "
              f"{result['p99_ms']:.0f} |")
    ratio = under_abuse["p99_ms"] / baseline["p99_ms"]
    print("\n| abusive request | sent | statuses | slowest s | answer |\n|---|---:|---|---:|---|")
    hung = 0
    for name, _ in ABUSIVE:
        got = answers.get(name, [])
        statuses = sorted({status for status, _, _ in got})
        hung += sum(status in ("TIMEOUT", "ERROR") for status, _, _ in got)
        slowest = max((seconds for _, seconds, _ in got), default=float("nan"))
        print(f"| {name} | {len(got)} | {', '.join(statuses)} | {slowest:.2f} | {got[-1][2] if got else ''} |")
    print(f"\nwithin bounds but slow (--batch-deadline-s {args.deadline_s:g})")
    print("| what | got |\n|---|---|")
    for name, got in deadline_rows:
        print(f"| {name} | {got} |")
    all_4xx = all(status.startswith("4") for got in answers.values() for status, _, _ in got)
    met = ratio <= 2.0 and hung == 0 and all_4xx and under_abuse["failed"] == 0
    print(f"\np99 with abuse / baseline: {ratio:.2f}x; abusive requests timed out or failed: {hung}; "
          f"all answered 4xx: {all_4xx}; target (p99 within 2x, nothing hangs): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
