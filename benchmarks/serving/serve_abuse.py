"""Does ``nmt serve`` hold when some clients send abusive requests? Well-formed load
alone, then the same load while another client sends every kind of abusive request in
turn: the latency of the well-formed requests in both runs, and what each abusive
request got back, in how long.

The abusive requests are the ones that used to stop or slow the service for everyone:
unbounded or non-finite search settings, a ``min_length`` no output can pass, a body of
64 MB, over-long sentences, malformed JSON, too many sentences. Target: the well-formed
requests' p99 within 2x of the baseline's, every abusive request answered with a 4xx,
and nothing hangs (every request has a timeout, and one that reaches it is counted).

Then the worst legal request: the costliest search within ``--max-request-cost``
(beam 16, long sentences, every output forced to the longest the model allows), sent
again and again by a fifth client during the same well-formed load. Target: the
well-formed p99 within 2x of the baseline's. The same phase runs against a service
without the bulk lane (``--bulk-request-cost`` equal to ``--max-request-cost``: one
decode process), side by side, and one sentence more than the worst legal request must
get a 413.

A last phase, on a service with a short ``--batch-deadline-s``, sends the worst legal
request once: it must end at the deadline with a 503, the service answering
``/health`` with 503 until its decode process is back, and well-formed requests
succeeding again afterwards.

    python -m benchmarks.serving.serve_abuse MODEL_DIR --sources src.txt   # from the repository root
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from benchmarks.serving.serve_load import running_service

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


def worst_legal_request(url: str, lines: list[str], max_cost: int) -> tuple[dict, str]:
    """The costliest request within ``max_cost`` hypothesis steps, and what it is: beam
    16, sentences near the service's token limit (lines joined), every output forced to
    the longest the model's positions allow (``min_length`` one below it). The service's
    own 422 says how long that is."""
    long_sentence = " ".join(lines)[:2000]
    while True:  # cut to the service's token limit, as its 413 says it
        probe = {"sentences": [long_sentence], "beam_size": 16, "max_length_a": 0.0, "max_length_b": 1024,
                 "min_length": 1024}
        answer = requests.post(f"{url}/translate", json=probe, timeout=TIMEOUT_S)
        over = re.search(r"is (\d+) tokens long: at most (\d+)", answer.text)
        if answer.status_code != 413 or not over:
            break
        long_sentence = long_sentence[:int(len(long_sentence) * int(over.group(2)) / int(over.group(1)) * 0.95)]
    found = re.search(r"allowed for sentence 0 \((\d+) tokens", answer.text)
    if answer.status_code != 422 or not found:
        raise SystemExit(f"the service did not say its longest output: {answer.status_code} {answer.text[:300]}")
    longest = int(found.group(1))
    count = max(1, max_cost // (16 * longest))
    body = {**probe, "sentences": [long_sentence] * count, "max_length_b": longest, "min_length": longest - 1}
    return body, f"{count} sentences of {len(long_sentence)} characters, beam 16, {longest - 1}+ tokens each"


def keep_sending(url: str, body: dict, stop: threading.Event, got: list) -> None:
    """``body`` again and again, each once the last is answered, until ``stop``."""
    while not stop.is_set():
        got.append(send(url, json.dumps(body)))


def with_worst_request(url: str, lines: list[str], clients: int, seconds: float, worst: dict) -> tuple[dict, list]:
    """The well-formed load while another client keeps sending ``worst``."""
    stop, got = threading.Event(), []
    sender = threading.Thread(target=keep_sending, args=(url, worst, stop, got))
    sender.start()
    time.sleep(0.5)  # its first search under way
    load = well_formed_load(url, lines, clients, seconds)
    stop.set()
    sender.join()
    return load, got


def past_the_deadline(url: str, lines: list[str], slow: dict, what: str) -> list[tuple[str, str]]:
    """The deadline phase: what the slow request, /health and a later request got."""
    rows = []
    status, seconds, text = send(url, json.dumps(slow))
    rows.append((f"worst legal request ({what})", f"{status} after {seconds:.1f} s: {text}"))
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
    parser.add_argument("--max-request-cost", type=int, default=65_536, help="The service's --max-request-cost.")
    parser.add_argument("--deadline-s", type=float, default=1.0,
                        help="--batch-deadline-s of the last phase's service (the others keep the default).")
    args = parser.parse_args()
    lines = [line for line in args.sources.read_text(encoding="utf-8").splitlines() if line.strip()][:500]
    cost = ("--max-request-cost", str(args.max_request_cost))

    with running_service(args.model, extra=cost) as url:
        well_formed_load(url, lines, args.clients, 5)  # warm-up
        baseline = well_formed_load(url, lines, args.clients, args.seconds)
        stop, answers = threading.Event(), {}
        abuser = threading.Thread(target=abuse_until, args=(url, stop, answers))
        abuser.start()
        under_abuse = well_formed_load(url, lines, args.clients, args.seconds)
        stop.set()
        abuser.join()
        worst, what = worst_legal_request(url, lines, args.max_request_cost)
        one_more = send(url, json.dumps({**worst, "sentences": worst["sentences"] * 2}))
        with_worst, worst_got = with_worst_request(url, lines, args.clients, args.seconds, worst)
    # The same, with one decode process: the costly request shares it with the short ones.
    with running_service(args.model, extra=(*cost, "--bulk-request-cost", str(args.max_request_cost))) as url:
        well_formed_load(url, lines, args.clients, 5)
        single_baseline = well_formed_load(url, lines, args.clients, args.seconds)
        single_with_worst, single_got = with_worst_request(url, lines, args.clients, args.seconds, worst)
    with running_service(args.model, extra=(*cost, "--batch-deadline-s", str(args.deadline_s))) as url:
        deadline_rows = past_the_deadline(url, lines, worst, what)

    print(f"\nwell-formed load: {args.clients} clients, 2 sentences a request, beam 4, {args.seconds:g} s a phase")
    print("| service | phase | requests | failed | p50 ms | p99 ms | p99 / its baseline |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = [("bulk lane (default)", "baseline", baseline, baseline),
            ("bulk lane (default)", "with abusive requests", under_abuse, baseline),
            ("bulk lane (default)", "with the worst legal request", with_worst, baseline),
            ("one decode process", "baseline", single_baseline, single_baseline),
            ("one decode process", "with the worst legal request", single_with_worst, single_baseline)]
    for service, name, result, base in rows:
        print(f"| {service} | {name} | {result['requests']} | {result['failed']} | {result['p50_ms']:.0f} | "
              f"{result['p99_ms']:.0f} | {result['p99_ms'] / base['p99_ms']:.2f}x |")
    ratio = under_abuse["p99_ms"] / baseline["p99_ms"]
    worst_ratio = with_worst["p99_ms"] / baseline["p99_ms"]
    print(f"\nthe worst legal request (--max-request-cost {args.max_request_cost:,}): {what}")
    print("| service | sent | statuses | fastest s | slowest s |\n|---|---:|---|---:|---:|")
    for service, got in (("bulk lane (default)", worst_got), ("one decode process", single_got)):
        durations = [seconds for _, seconds, _ in got]
        print(f"| {service} | {len(got)} | {', '.join(sorted({status for status, _, _ in got}))} | "
              f"{min(durations, default=float('nan')):.1f} | {max(durations, default=float('nan')):.1f} |")
    print(f"twice its sentences: {one_more[0]} in {one_more[1]:.2f} s: {one_more[2]}")
    print("\n| abusive request | sent | statuses | slowest s | answer |\n|---|---:|---|---:|---|")
    hung = 0
    for name, _ in ABUSIVE:
        got = answers.get(name, [])
        statuses = sorted({status for status, _, _ in got})
        hung += sum(status in ("TIMEOUT", "ERROR") for status, _, _ in got)
        slowest = max((seconds for _, seconds, _ in got), default=float("nan"))
        print(f"| {name} | {len(got)} | {', '.join(statuses)} | {slowest:.2f} | {got[-1][2] if got else ''} |")
    print(f"\npast the deadline (a service with --batch-deadline-s {args.deadline_s:g})")
    print("| what | got |\n|---|---|")
    for name, got in deadline_rows:
        print(f"| {name} | {got} |")
    all_4xx = all(status.startswith("4") for got in answers.values() for status, _, _ in got)
    met = (ratio <= 2.0 and worst_ratio <= 2.0 and hung == 0 and all_4xx and under_abuse["failed"] == 0
           and with_worst["failed"] == 0 and one_more[0] == "413")
    print(f"\np99 with abuse / baseline: {ratio:.2f}x; with the worst legal request: {worst_ratio:.2f}x; "
          f"abusive requests timed out or failed: {hung}; all answered 4xx: {all_4xx}; "
          f"target (p99 within 2x of the baseline, nothing hangs, over the cost limit 413): "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
