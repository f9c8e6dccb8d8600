"""The translation service: a Ray Serve deployment behind a FastAPI app.

- ``POST /translate`` takes ``{"sentences": [...], "beam_size": 4, "nbest": 1, ...}``
  (the search settings of ``nmt translate`` and the evaluate stage, by the same names) and
  answers ``{"translations": [{"text", "score", "nbest": [{"text", "score"}, ...]}]}``,
  one entry per sentence, in order;
- ``GET /health`` answers once the model is loaded;
- ``GET /stats`` counts what this replica has decoded: batches, sentences, requests and
  seconds in the decoder, so that a load test can tell small batches from an idle
  decoder, and the requests it refused (a lane full) or dropped (the client gone before
  its batch): with several replicas, each answer is one replica's;
- ``/openapi.json`` and ``/docs`` describe the API (FastAPI writes them).

Dynamic batching (``batcher.py``): while a batch decodes, the requests that arrive
queue; once the decoder is free they form the next batch, up to
``max_batch_sentences`` sentences, waiting up to ``batch_wait_s`` for more when that is
not a full batch, and up to ``batch_max_wait_s`` while it holds fewer sentences than
the last round had in flight (the clients of the last batch come back). A batch is
decoded in a child process of the replica (``stages/shared/inference/decode_pool.py`` says why
not a thread), so the replica keeps accepting the requests that will form the next one.
Requests with different search settings share the wait but are decoded apart. Ray
Serve's health check fails once the child has died, and Serve replaces the replica.

Bad requests get a 4xx with a message and never reach the model: malformed JSON and
unknown or out-of-range options (422, FastAPI's validation, naming the field and its
limit), a body over what ``max_sentences`` and ``max_input_chars`` allow
(``body_limit_bytes``: 413, before it is read whole) or one that has not arrived within
``body_deadline_s`` (408: ``body_limit.py``), a lone surrogate in a sentence (400), too many
sentences (413), a sentence over the character or token limit (413, naming its index;
characters are counted before anything is tokenized, and tokenizing runs off the event
loop), a ``min_length`` that a sentence's longest allowed output cannot exceed (422).

No request can hold the decoder for ever, nor hold up the others:

- each lane holds a bounded number of requests, queued or decoding
  (``max_requests_in_flight``, ``max_bulk_requests_in_flight``: ``lanes.py``); a request
  finding its lane full gets 503 with Retry-After at once, and Ray Serve's own queue in
  front of the replicas is bounded too. A request whose client goes while it waits is
  dropped before its batch is decoded.
- every search setting is bounded (``stages/shared/inference/search.py``), and so is a
  request's cost: the decoder steps its search may take over all its hypotheses (beam
  size times each sentence's output limit, summed: ``SearchSettings.hypothesis_steps``).
  A request over ``max_request_cost`` gets a 413 with the limit before it is queued.
- A request costing more than ``bulk_request_cost``, or whose search may take longer
  than ``normal_lane_s`` on this replica's decoder (every hypothesis to its limit, one
  step after another: ``decode_time.py``, measured at start-up), is decoded in the bulk
  lane: a second decode process with its own batches, at the lowest CPU priority (Linux's
  SCHED_IDLE), so that while a long search runs, short requests keep their own decoder
  and nearly all of a shared core. Without it one legal request of 16 long sentences at
  beam 16 held the replica for its whole 30 s deadline, and every request sent meanwhile
  waited (benchmarks/serving/serve_abuse.py measures both).
- Each batch has a deadline: ``batch_deadline_s`` for a batch costing up to
  ``max_request_cost``, scaled up with a costlier batch's cost. A batch that runs past
  it has its decode process killed and restarted: only that batch's requests get a 503,
  and ``/health`` answers 503 until the new process has loaded. A decode process that
  dies (killed, out of memory) is restarted the same way, found by the next batch or by
  Ray Serve's health check, whichever comes first. Requests with different
  search settings are decoded apart, and one group's failure fails that group's
  requests alone.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations as
# classes to tell a JSON body from query parameters.
import asyncio
import functools
import os
import time
from dataclasses import dataclass
from typing import Callable

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, model_validator
from ray import serve

from pipeline.serving.backends import open_backend
from pipeline.serving.batcher import DynamicBatcher
from pipeline.serving.body_limit import BodyLimit
from pipeline.serving.decode_time import measure as measure_decode_time
from pipeline.serving.decode_time import search_shape
from pipeline.serving.lanes import Lane, LaneFull
from stages.shared.inference.decode_pool import DecodeDeadlineExceeded, DecodePool, DecodeProcessExited
from stages.shared.inference.model_file import ModelFiles, SourceEncoder
from stages.shared.inference.search import SearchSettings, output_room

MAX_BEAM = 16


@dataclass(frozen=True)
class ServiceSettings:
    backend: str = "ours"  # or "ctranslate2"
    quantization: str | None = None  # ctranslate2 weights (int8, ...)
    device: str = "cpu"
    threads: int = 1  # intra-op threads per replica
    max_sentences: int = 64  # per request
    max_input_tokens: int = 256  # SentencePiece tokens per sentence, EOS included
    max_input_chars: int = 2048  # characters per sentence, checked before tokenizing
    batch_deadline_s: float = 30.0  # a batch costing max_request_cost decoding longer is stopped (process restarted)
    max_request_cost: int = 65_536  # hypothesis steps a request may cost (SearchSettings.hypothesis_steps)
    bulk_request_cost: int = 8_192  # a request costing more goes to the bulk lane (none if >= max_request_cost)
    normal_lane_s: float = 0.3  # so does one whose search may take longer than this here (decode_time.py)
    max_batch_sentences: int = 64
    max_requests_in_flight: int = 64  # short requests a replica holds, queued or decoding (more: 503)
    max_bulk_requests_in_flight: int = 4  # costly ones (more: 503)
    body_deadline_s: float = 10.0  # a request body must arrive whole within this (else 408)
    batch_wait_s: float = 0.01  # how long a batch that is not full waits for more
    batch_max_wait_s: float = 0.15  # ... while it holds fewer than the last round had in flight (batcher.py)


class TranslateRequest(SearchSettings):
    """The sentences, and how to search: ``SearchSettings``' fields and checks, but
    ``precision`` and ``device``, which are the replica's (``nmt serve`` options)."""

    sentences: list[str] = Field(min_length=1, description="The sentences to translate.")

    @model_validator(mode="after")
    def _within_the_service_limits(self) -> "TranslateRequest":
        replica_settings = {"precision", "device"} & self.model_fields_set
        if replica_settings:
            raise ValueError(f"{', '.join(sorted(replica_settings))}: set by the replica (nmt serve), not a request")
        if self.beam_size > MAX_BEAM:
            raise ValueError(f"beam_size ({self.beam_size}) exceeds this service's limit of {MAX_BEAM}")
        return self


class Hypothesis(BaseModel):
    text: str
    score: float


class Translation(BaseModel):
    text: str
    score: float
    nbest: list[Hypothesis]


class TranslateResponse(BaseModel):
    translations: list[Translation]


class Stats(BaseModel):
    requests: int = 0
    bulk_requests: int = 0  # of those, decoded in the bulk lane
    in_flight: int = 0  # short requests held now, queued or decoding
    bulk_in_flight: int = 0  # costly ones
    refused: int = 0  # requests answered 503 at once: their lane was full
    dropped: int = 0  # requests whose client went before their batch was decoded: never decoded
    dropped_unqueued: int = Field(0, exclude=True)  # of those, gone before they reached a lane
    batches: int = 0  # decoder calls: a batch whose requests differ in search options makes several
    sentences: int = 0
    decode_seconds: float = 0.0  # wall time the decode process spent on them


class Health(BaseModel):
    status: str
    backend: str
    model: str
    # The decoder as measured at start-up (decode_time.py): what routes a request whose
    # search may take longer than normal_lane_s to the bulk lane.
    decode_step_ms: float
    decode_row_ms: float


def body_limit_bytes(settings: ServiceSettings) -> int:
    """The largest request body worth reading: ``max_sentences`` sentences of
    ``max_input_chars`` characters, each written as a 6-byte JSON escape at worst."""
    return settings.max_sentences * (6 * settings.max_input_chars + 8) + 4096


api = FastAPI(title="nmt-pipeline translation service",
              description="Translate sentences with a model trained by nmt-pipeline.")


@api.exception_handler(RequestValidationError)
async def _validation_error(request, error: RequestValidationError) -> JSONResponse:
    """FastAPI's 422, with each error's field and message but not the input it echoes:
    an input of NaN or Infinity cannot be written as JSON, and answering it made a 500."""
    detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in error.errors()]
    return JSONResponse(status_code=422, content={"detail": detail})


# The replica's limits come in its environment (service_app sets them): the middleware is
# built with the app, before any replica's settings exist.
BODY_LIMIT_ENV, BODY_DEADLINE_ENV = "NMT_SERVE_BODY_LIMIT", "NMT_SERVE_BODY_DEADLINE_S"
api.add_middleware(BodyLimit,
                   limit=lambda: int(os.environ.get(BODY_LIMIT_ENV) or body_limit_bytes(ServiceSettings())),
                   deadline_s=lambda: float(os.environ.get(BODY_DEADLINE_ENV) or ServiceSettings.body_deadline_s))
# What a refused request is told: a lane frees a place as soon as one of its batches ends.
RETRY_AFTER_S = 1


# How often a waiting request checks that its client is still there.
CLIENT_CHECK_S = 0.25


# Above the deployment: Ray Serve pickles its class with what it refers to when it is
# decorated, before the rest of this module exists.
async def _unless_client_goes(http: Request, waiting):
    """``waiting``'s result; cancelled if the client disconnects first (found here, or
    the request cancelled by Ray Serve, which does so when its client goes), so that its
    job leaves its batcher's queue undecoded (the batcher counts it as dropped)."""
    task = asyncio.ensure_future(waiting)
    try:
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=CLIENT_CHECK_S)
            if not done and await http.is_disconnected():
                task.cancel()
        return await task
    finally:
        task.cancel()  # no-op once it is done; else this request was cancelled, and its job goes too


@dataclass(frozen=True)
class Job:
    """One request's share of a batch."""

    sources: list[list[int]]
    search: SearchSettings
    cost: int  # SearchSettings.hypothesis_steps of its sentences


@serve.deployment
@serve.ingress(api)
class TranslationService:
    def __init__(self, fetch_model: Callable, model_name: str, settings: ServiceSettings):
        model_dir = fetch_model()  # a local path, or the train artifact fetched from the store onto this node
        self.encoder = SourceEncoder.of(ModelFiles.find(model_dir))
        open_engine = functools.partial(open_backend, model_dir, settings.backend, settings.device,
                                        settings.threads, settings.quantization)
        self.decoder = DecodePool(open_engine, workers=1, threads_per_worker=settings.threads)
        # The bulk lane (the module's docstring): costly requests, in a process of their own.
        self.bulk_decoder = (DecodePool(open_engine, workers=1, threads_per_worker=settings.threads, background=True)
                             if settings.bulk_request_cost < settings.max_request_cost else None)
        self.settings, self.model_name = settings, model_name
        self.decode_time = measure_decode_time(lambda sources, search: self.decoder.translate(sources, search))
        self.stats = Stats()
        self.lane = Lane("normal", self._batcher_for(self.decoder), settings.max_requests_in_flight)
        self.bulk_lane = (Lane("bulk", self._batcher_for(self.bulk_decoder), settings.max_bulk_requests_in_flight)
                          if self.bulk_decoder else None)

    def _batcher_for(self, pool: DecodePool) -> DynamicBatcher:
        # The decoding waits on the child's pipe in a worker thread: the event loop goes on.
        return DynamicBatcher(lambda jobs: asyncio.to_thread(self._decode, jobs, pool), lambda job: len(job.sources),
                              self.settings.max_batch_sentences, self.settings.batch_wait_s,
                              self.settings.batch_max_wait_s)

    @property
    def decoders(self) -> list[DecodePool]:
        return [pool for pool in (self.decoder, self.bulk_decoder) if pool is not None]

    def check_health(self) -> None:
        """Ray Serve's periodic check: a decode process that died is replaced in the
        replica (as one stopped at a deadline is); a replica whose replacement cannot
        load the model fails, and Ray Serve replaces the replica."""
        for pool in self.decoders:
            pool.replace_exited()
            if not pool.alive():
                raise RuntimeError(f"the decode process (pid {', '.join(map(str, pool.pids))}) has exited")

    def __del__(self):  # Ray Serve's shutdown hook
        for name in ("decoder", "bulk_decoder"):  # not those the constructor did not get to
            if getattr(self, name, None) is not None:
                getattr(self, name).close()

    @api.get("/health", response_model=Health)
    def health(self) -> Health:
        if not all(pool.alive() for pool in self.decoders):
            raise HTTPException(503, "a decode process has exited; Ray Serve will replace this replica")
        if not all(pool.ready() for pool in self.decoders):
            raise HTTPException(503, "a decode process is restarting (it died, or a batch ran past its deadline)")
        return Health(status="ok", backend=self.decoder.name, model=self.model_name,
                      decode_step_ms=1e3 * self.decode_time.per_step_s, decode_row_ms=1e3 * self.decode_time.per_row_s)

    @api.get("/stats", response_model=Stats)
    def statistics(self) -> Stats:
        self.stats.dropped = self.stats.dropped_unqueued + sum(lane.batcher.dropped for lane in self.lanes)
        self.stats.in_flight = self.lane.held
        self.stats.bulk_in_flight = self.bulk_lane.held if self.bulk_lane else 0
        return self.stats

    @property
    def lanes(self) -> list[Lane]:
        return [lane for lane in (self.lane, self.bulk_lane) if lane is not None]

    @api.post("/translate", response_model=TranslateResponse)
    async def translate(self, request: TranslateRequest, http: Request) -> TranslateResponse:
        limit = self.settings.max_sentences
        if len(request.sentences) > limit:
            raise HTTPException(413, f"{len(request.sentences)} sentences: at most {limit} a request")
        for index, sentence in enumerate(request.sentences):  # before any tokenizing
            if len(sentence) > self.settings.max_input_chars:
                raise HTTPException(413, f"sentences[{index}] is {len(sentence)} characters long: at most "
                                         f"{self.settings.max_input_chars}")
            try:
                sentence.encode("utf-8")
            except UnicodeEncodeError as error:  # JSON allows "\ud800" alone; no text holds it
                raise HTTPException(400, f"sentences[{index}] is not valid Unicode: a lone surrogate "
                                         f"(U+{ord(sentence[error.start]):04X}) at character {error.start}") from None
        present = [i for i, sentence in enumerate(request.sentences) if sentence.strip()]
        # In a worker thread: the event loop goes on taking requests (and /health) meanwhile.
        sources = await asyncio.to_thread(self.encoder.encode, [request.sentences[i] for i in present])
        for index, ids in zip(present, sources):
            if len(ids) > self.settings.max_input_tokens:
                raise HTTPException(413, f"sentences[{index}] is {len(ids)} tokens long: at most "
                                         f"{self.settings.max_input_tokens}")
        search = request.search_settings()
        lengths = [len(ids) for ids in sources]
        room = functools.partial(output_room, self.decoder.positions)
        try:
            search.check_min_length(lengths, room)
        except ValueError as error:
            raise HTTPException(422, str(error)) from None
        cost = search.hypothesis_steps(lengths, room)
        if cost > self.settings.max_request_cost:
            raise HTTPException(413, f"this request may cost {cost:,} hypothesis steps (beam_size x each "
                                     f"sentence's output limit, max_length_a x its tokens + max_length_b, summed): "
                                     f"at most {self.settings.max_request_cost:,} a request; send fewer sentences, "
                                     f"a smaller beam_size or a lower max_length_b")
        # Costly in steps, or long one step after another (min_length forcing them, say):
        # either would hold the normal lane's decoder past normal_lane_s.
        depth, width = search_shape(search, lengths, room) if lengths else (0, 0)  # all blank: nothing to decode
        costly = (cost > self.settings.bulk_request_cost
                  or self.decode_time.seconds(depth, width) > self.settings.normal_lane_s)
        lane = self.bulk_lane if self.bulk_lane and costly else self.lane
        if await http.is_disconnected():  # gone while its request was on its way or tokenized
            self.stats.dropped_unqueued += 1
            raise HTTPException(499, "the client closed the connection")
        try:
            with lane.admitted() as batcher:
                found = await _unless_client_goes(http, batcher.submit(Job(sources, search, cost))) if sources else []
        except LaneFull as full:
            self.stats.refused += 1
            raise HTTPException(503, f"{full}: retry in {RETRY_AFTER_S} s", headers={"Retry-After": str(RETRY_AFTER_S)})
        if isinstance(found, DecodeProcessExited):  # Ray Serve's health check will replace this replica
            raise HTTPException(503, f"{found}; retry: this replica is being replaced")
        if isinstance(found, DecodeDeadlineExceeded):
            raise HTTPException(503, f"{found}; retry once /health answers ok")
        if isinstance(found, Exception):
            raise HTTPException(500, f"decoding failed: {str(found).strip().splitlines()[-1]}")
        translations = [Translation(text="", score=0.0, nbest=[Hypothesis(text="", score=0.0)])
                        for _ in request.sentences]  # a blank line translates to a blank line
        for index, hypotheses in zip(present, found):
            nbest = [Hypothesis(text=candidate.text, score=candidate.hypothesis.score) for candidate in hypotheses]
            if nbest:  # a search in which nothing finished: the empty translation
                translations[index] = Translation(text=nbest[0].text, score=nbest[0].score, nbest=nbest)
        return TranslateResponse(translations=translations)

    def _decode(self, jobs: list[Job], pool: DecodePool) -> list:
        """Each job's translations (``stages.shared.inference.translator.Translation`` lists), or
        the exception that failed its group: the jobs that share search settings are
        decoded as one batch by ``pool``, and one group's failure is its own."""
        results: list = [None] * len(jobs)
        for search in dict.fromkeys(job.search for job in jobs):
            members = [i for i, job in enumerate(jobs) if job.search == search]
            sources = [ids for i in members for ids in jobs[i].sources]
            # Several requests of the largest legal cost take that much longer.
            cost = sum(jobs[i].cost for i in members)
            deadline_s = self.settings.batch_deadline_s * max(1.0, cost / self.settings.max_request_cost)
            started = time.perf_counter()
            try:
                decoded = iter(pool.translate(sources, search, deadline_s))
            except Exception as error:  # noqa: BLE001 - handed to this group's requests
                for i in members:
                    results[i] = error
                continue
            finally:
                self.stats.decode_seconds += time.perf_counter() - started
            self.stats.batches += 1
            self.stats.sentences += len(sources)
            self.stats.requests += len(members)
            self.stats.bulk_requests += len(members) if pool is self.bulk_decoder else 0
            for i in members:
                results[i] = [next(decoded) for _ in jobs[i].sources]
        return results


# A replica's places beyond its lanes': /health, /stats, and requests on their way to a
# lane's refusal.
SPARE_REQUESTS = 16


def service_app(fetch_model: Callable, model_name: str, settings: ServiceSettings, replicas: int,
                cpus_per_replica: float, gpus_per_replica: float):
    """The deployment bound to its model and resources, ready for ``serve.run``."""
    if settings.max_sentences > settings.max_batch_sentences:
        raise ValueError(f"max_sentences ({settings.max_sentences}) cannot exceed max_batch_sentences "
                         f"({settings.max_batch_sentences}): one request must fit in one batch")
    # A replica takes its lanes' requests and a few more; past that Ray Serve queues a
    # bounded number per replica and answers 503 to the rest, never queueing without end.
    ongoing = settings.max_requests_in_flight + settings.max_bulk_requests_in_flight + SPARE_REQUESTS
    environment = {BODY_LIMIT_ENV: str(body_limit_bytes(settings)), BODY_DEADLINE_ENV: str(settings.body_deadline_s)}
    return TranslationService.options(
        num_replicas=replicas, max_ongoing_requests=ongoing, max_queued_requests=ongoing * replicas,
        ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica,
                           "runtime_env": {"env_vars": environment}},
    ).bind(fetch_model, model_name, settings)
