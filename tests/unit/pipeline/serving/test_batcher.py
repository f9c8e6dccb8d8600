"""DynamicBatcher (pipeline/serving/batcher.py): batches formed when the decoder is free.
Every scenario runs on a virtual clock (tests/virtual_clock.py): its decode times,
arrivals and waits happen at exactly the times written, so a batch's makeup never
depends on how long a real sleep took on a loaded machine."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.serving.batcher import DynamicBatcher
from tests.virtual_clock import run


class SlowDecoder:
    """Upper-cases each job's sentences after ``seconds``; records the batches it got."""

    def __init__(self, seconds: float, fail_on: str | None = None):
        self.seconds, self.fail_on, self.batches = seconds, fail_on, []

    async def __call__(self, jobs: list[list[str]]) -> list[list[str]]:
        self.batches.append(jobs)
        await asyncio.sleep(self.seconds)
        if self.fail_on is not None and any(self.fail_on in job for job in jobs):
            raise RuntimeError(f"cannot decode {self.fail_on}")
        return [[sentence.upper() for sentence in job] for job in jobs]


def batcher_for(decoder: SlowDecoder, max_size: int = 8, wait_s: float = 0.01) -> DynamicBatcher:
    return DynamicBatcher(decoder, len, max_size, wait_s)


async def submit_later(batcher: DynamicBatcher, job: list[str], delay: float) -> list[str]:
    await asyncio.sleep(delay)
    return await batcher.submit(job)


def test_requests_arriving_during_a_decode_form_one_batch_once_it_is_done():
    """Three requests 50 ms apart while the first batch decodes for 300 ms, with a 10 ms
    wait: serve.batch would have cut them into three batches; here they are one."""
    async def scenario():
        decoder = SlowDecoder(0.3)
        batcher = batcher_for(decoder)
        return decoder, await asyncio.gather(batcher.submit(["a"]), submit_later(batcher, ["b"], 0.05),
                                             submit_later(batcher, ["c"], 0.10), submit_later(batcher, ["d"], 0.15))

    decoder, results = run(scenario())
    assert decoder.batches == [[["a"]], [["b"], ["c"], ["d"]]]
    assert results == [["A"], ["B"], ["C"], ["D"]]


def test_batches_hold_at_most_max_size_sentences_in_arrival_order():
    async def scenario():
        decoder = SlowDecoder(0.05)
        batcher = batcher_for(decoder, max_size=4)
        jobs = [["a", "b"], ["c"], ["d", "e"], ["f"], ["g", "h", "i", "j"]]
        return decoder, jobs, await asyncio.gather(*(batcher.submit(job) for job in jobs))

    decoder, jobs, results = run(scenario())
    # ["d", "e"] would make 5: it starts the next batch, and nothing overtakes it.
    assert decoder.batches == [[["a", "b"], ["c"]], [["d", "e"], ["f"]], [["g", "h", "i", "j"]]]
    assert results == [[sentence.upper() for sentence in job] for job in jobs]


def test_a_lone_request_waits_for_company_then_goes_alone():
    async def scenario():
        decoder = SlowDecoder(0.0)
        batcher = batcher_for(decoder, wait_s=0.2)
        first = asyncio.create_task(batcher.submit(["a"]))
        late = asyncio.create_task(submit_later(batcher, ["b"], 0.05))  # within the wait: same batch
        await asyncio.gather(first, late)
        await batcher.submit(["c"])  # nobody else: decoded after the wait, alone
        return decoder

    assert run(scenario()).batches == [[["a"], ["b"]], [["c"]]]


def closed_loop_clients(batcher: DynamicBatcher, clients: int, rounds: int, think_s: float):
    """Clients that each send ``rounds`` one-sentence requests, the next ``think_s`` after
    the last answer (the answer's way back and the next request's way in), the first
    client at once and the others while its first batch decodes."""
    async def client(index: int) -> None:
        await asyncio.sleep(0.0 if index == 0 else 0.05)
        for r in range(rounds):
            await batcher.submit([f"c{index}r{r}"])
            await asyncio.sleep(think_s)
    return asyncio.gather(*(client(index) for index in range(clients)))


def test_the_clients_of_the_last_round_are_waited_for_up_to_the_longest_wait():
    """Four clients whose next request comes 100 ms after each answer, a 10 ms wait: with
    a fixed wait, the first client and the other three take turns for good; waiting up to
    a second for those of the last round, all four meet from the second batch on."""
    async def scenario(max_wait_s: float | None):
        decoder = SlowDecoder(0.2)
        await closed_loop_clients(DynamicBatcher(decoder, len, 8, 0.01, max_wait_s), 4, 3, 0.1)
        return [len(batch) for batch in decoder.batches]

    assert run(scenario(None)) == [1, 3, 1, 3, 1, 3]
    assert run(scenario(1.0)) == [1, 4, 4, 3]


def test_a_lone_client_does_not_wait_for_the_longest_wait():
    """One client: the last round had one request in flight, so its next request goes
    after the short wait, never the long one."""
    async def scenario():
        decoder = SlowDecoder(0.0)
        batcher = DynamicBatcher(decoder, len, 8, 0.01, 5.0)
        started = asyncio.get_running_loop().time()
        await closed_loop_clients(batcher, 1, 3, 0.0)
        return decoder, asyncio.get_running_loop().time() - started

    decoder, seconds = run(scenario())
    assert [len(batch) for batch in decoder.batches] == [1, 1, 1]
    assert seconds < 1.0


def test_the_longest_wait_cannot_be_shorter_than_the_wait():
    with pytest.raises(ValueError, match="longest wait"):
        DynamicBatcher(SlowDecoder(0.0), len, 8, 0.2, 0.1)


def test_a_failed_batch_fails_its_callers_and_the_next_batch_is_decoded():
    async def scenario():
        batcher = batcher_for(SlowDecoder(0.05, fail_on="bad"))
        failed = await asyncio.gather(batcher.submit(["bad"]), batcher.submit(["fine"]), return_exceptions=True)
        return failed, await batcher.submit(["later"])

    failed, later = run(scenario())
    assert all(isinstance(result, RuntimeError) and "cannot decode bad" in str(result) for result in failed)
    assert later == ["LATER"]


def test_a_job_larger_than_a_batch_is_refused():
    async def scenario():
        await batcher_for(SlowDecoder(0.0), max_size=2).submit(["a", "b", "c"])

    with pytest.raises(ValueError, match="size 3 cannot fit in a batch of 2"):
        run(scenario())


def test_a_job_whose_caller_went_while_it_queued_is_dropped_undecoded_and_counted():
    """A client that disconnects while its request waits behind a decoding batch: its
    job never reaches the decoder, and the batcher counts it."""
    async def scenario():
        decoder = SlowDecoder(0.3)
        batcher = batcher_for(decoder)
        first = asyncio.ensure_future(batcher.submit(["a"]))
        await asyncio.sleep(0.05)
        gone = asyncio.ensure_future(batcher.submit(["b"]))
        staying = asyncio.ensure_future(batcher.submit(["c"]))
        await asyncio.sleep(0.05)
        gone.cancel()  # what the service does when the client disconnects
        return decoder, batcher, await asyncio.gather(first, staying)

    decoder, batcher, results = run(scenario())
    assert decoder.batches == [[["a"]], [["c"]]] and results == [["A"], ["C"]]
    assert batcher.dropped == 1


def test_a_full_lane_refuses_at_once_and_frees_its_place_when_a_request_ends():
    from pipeline.serving.lanes import Lane, LaneFull

    lane = Lane("bulk", batcher=None, limit=2)
    with lane.admitted(), lane.admitted():
        with pytest.raises(LaneFull, match="the bulk lane holds 2 requests, its limit"):
            with lane.admitted():
                pass
    with lane.admitted():
        assert lane.held == 1
    with pytest.raises(RuntimeError):
        with lane.admitted():
            raise RuntimeError("a failed decode")
    assert lane.held == 0
