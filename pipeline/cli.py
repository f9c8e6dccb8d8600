"""The ``nmt`` command: parses arguments and hands each command to its module in
``pipeline/commands/`` (run, status and verify, report, translate, attention, inspect,
export, serve)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import List, Literal, Optional

import typer

from pipeline.commands.console import console
from pipeline.core.hardware import Precision
from pipeline.ray_output import plain_text
from stages.shared.inference.search_defaults import SEARCH_DEFAULTS

# Plain help (click's formatter): rich's, which Typer uses where rich is installed, took
# a third of the 0.3 s `nmt --help` may take (benchmarks/tooling/cli_speed.py).
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Parallel corpus to trained, evaluated translation models, as a cached Ray task graph.")

ConfigArg = typer.Argument(..., help="Experiment YAML file (configs/*.yaml).")
SetOpt = typer.Option([], "--set", help="Override a config key, e.g. --set tokenize.shards=8 (repeatable).")
STAGE_NAMES = "download, clean, bpe, tokenize, train (every model's), train/MODEL, evaluate/MODEL, report"
RootOpt = typer.Option(None, "--artifact-root", envvar="NMT_ARTIFACT_ROOT",
                       help="Artifact store: a path, or an object store URI such as "
                            "s3://bucket/prefix?endpoint_override=HOST:PORT&scheme=http (gs://, hdfs:// too).")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"nmt-pipeline {version('nmt-pipeline')}")
        raise typer.Exit()


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
         show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                           help="Print the version and exit.")) -> None:
    from rich.logging import RichHandler  # here: `nmt --help` need not load it

    # Ray's colour codes kept out of log files and batch jobs' output (pipeline/ray_output.py).
    sys.stdout, sys.stderr = plain_text(sys.stdout), plain_text(sys.stderr)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False, show_time=False)])


@app.command()
def run(
    config: Path = ConfigArg,
    until: Optional[str] = typer.Option(None, "--until", help=f"Stop after this stage: {STAGE_NAMES}."),
    force: List[str] = typer.Option([], "--force", help=f"Recompute this stage and everything downstream "
                                                        f"(repeatable): {STAGE_NAMES}."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
    address: Optional[str] = typer.Option(None, "--address", envvar="RAY_ADDRESS",
                                          help="Ray cluster to join; default: start a local instance."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                               help="MLflow tracking URI; default: sqlite:///./mlflow.db."),
) -> None:
    """Run the stage graph, reusing every artifact that is already cached."""
    from pipeline.commands.run import run_experiment

    run_experiment(config, overrides, until, force, artifact_root, address, tracking_uri)


@app.command()
def status(config: Path = ConfigArg, overrides: List[str] = SetOpt,
           artifact_root: Optional[str] = RootOpt) -> None:
    """List each stage with its artifact state (cached / missing / invalid), key and size."""
    from pipeline.commands.status import show_status

    show_status(config, overrides, artifact_root)


@app.command()
def verify(config: Path = ConfigArg, overrides: List[str] = SetOpt,
           artifact_root: Optional[str] = RootOpt) -> None:
    """Like status, but re-hash every file of every artifact against its manifest; exit 1
    if any does not match."""
    from pipeline.commands.status import show_status

    show_status(config, overrides, artifact_root, verify=True)


@app.command()
def inspect(config: Path = ConfigArg, overrides: List[str] = SetOpt, artifact_root: Optional[str] = RootOpt,
            src_len: Optional[float] = typer.Option(None, help="Source tokens per pair (default: the corpus mean)."),
            tgt_len: Optional[float] = typer.Option(None, help="Target tokens per pair (default: the corpus mean)."),
            gpu: Optional[str] = typer.Option(None, help="GPU whose datasheet peak the GPU-hours estimate divides by "
                                                         "(default with train.use_gpu: H100)."),
            mfu: Optional[float] = typer.Option(None, min=0.0001, max=1.0, help="Model FLOPs utilisation the GPU-hours "
                                                                                "estimate assumes for every size (default: the MFU measured for each size's parameters)."),
            ) -> None:
    """Parameters and FLOPs per target token of every model in a config, and the
    counted FLOPs (on GPUs the GPU-hours) its graph will spend."""
    from pipeline.commands.inspect import inspect_models

    inspect_models(config, overrides, artifact_root, src_len, tgt_len, gpu, mfu)


@app.command()
def report(
    sources: List[str] = typer.Argument(..., help="Experiment YAML files and/or MLflow run ids of 'nmt run'."),
    output: Path = typer.Option(Path("report"), "--output", "-o", help="Directory for the report's files."),
    title: Optional[str] = typer.Option(None, help="Report title; default: the sources' names."),
    artifact_root: Optional[str] = RootOpt,
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                               help="MLflow tracking URI for run ids; default: sqlite:///./mlflow.db."),
    overrides: List[str] = typer.Option([], "--set", help="Override a key of every config given, e.g. --set "
                                                          "'seeds=[1,2]' (repeatable)."),
) -> None:
    """One comparison over the models of several configs or MLflow runs: the table, plots, intervals and tests."""
    from pipeline.commands.report import compare_sources

    compare_sources(sources, output, title, artifact_root, tracking_uri, overrides)


@app.command()
def translate(
    model: Path = typer.Argument(..., help="A model file (model.pt, best.pt), a train artifact directory, "
                                           "or an experiment YAML with --model."),
    model_name: Optional[str] = typer.Option(None, "--model", help="Which model of the experiment YAML."),
    input_file: Optional[Path] = typer.Option(None, "--input", "-i", help="Text to translate; default: stdin."),
    beam_size: int = typer.Option(SEARCH_DEFAULTS.beam_size, "--beam-size", "--beam", help="Beam size; 1 is greedy."),
    nbest: int = typer.Option(SEARCH_DEFAULTS.nbest, "--nbest", help="Print the N best of each input line as 'INDEX ||| text ||| score', INDEX the 0-based input line."),
    length_penalty: float = typer.Option(SEARCH_DEFAULTS.length_penalty, "--length-penalty", help="GNMT alpha."),
    max_length_a: float = typer.Option(SEARCH_DEFAULTS.max_length_a, "--max-length-a",
                                       help="At most a x source length + b output tokens."),
    max_length_b: int = typer.Option(SEARCH_DEFAULTS.max_length_b, "--max-length-b",
                                     help="At most a x source length + b output tokens."),
    min_length: int = typer.Option(SEARCH_DEFAULTS.min_length, "--min-length",
                                   help="Tokens before EOS may end a hypothesis."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Sentences per batch."),
    workers: int = typer.Option(1, "--workers", min=1,
                                help="Decode this many batches at once, each in a process of its own with an equal "
                                     "share of the CPU threads (CPU only; 2 on 2 cores decodes ~1.25x faster)."),
    device: str = typer.Option(SEARCH_DEFAULTS.device, "--device", help="cpu, cuda, cuda:1, ..."),
    precision: Precision = typer.Option(SEARCH_DEFAULTS.precision, "--precision",
                                        help="auto: bf16 where the device runs it natively, else fp32 (fp16 on "
                                             "older GPUs); bf16 and fp16 are autocast."),
    alignment: bool = typer.Option(False, "--alignment",
                                   help="Print 'text ||| i-j ...': source word i aligned to target word j, "
                                        "from the last layer's cross-attention (fairseq's format)."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
) -> None:
    """Translate lines of text with a trained model: one output line per input line."""
    from pipeline.commands.translate import search_settings, translate_text

    search = search_settings(beam_size=beam_size, nbest=nbest, length_penalty=length_penalty,
                             max_length_a=max_length_a, max_length_b=max_length_b, min_length=min_length,
                             device=device, precision=precision)
    translate_text(model, model_name, input_file, search, batch_size, artifact_root, alignment, workers, overrides)


@app.command()
def attention(
    model: Path = typer.Argument(..., help="A model file, a train artifact directory, or an experiment YAML "
                                           "with --model."),
    text: str = typer.Option(..., "--input", "-i", help="The source sentence."),
    output: Path = typer.Option(Path("attention"), "--output", "-o", help="Directory for the PNGs and index.html."),
    model_name: Optional[str] = typer.Option(None, "--model", help="Which model of the experiment YAML."),
    beam: int = typer.Option(4, "--beam", min=1, help="Beam size of the translation the maps are taken on."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, ..."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
) -> None:
    """Attention heatmaps of one translation, every layer and head, and an HTML page to browse them."""
    from pipeline.commands.translate import attention_files

    attention_files(model, model_name, text, output, beam, device, artifact_root, overrides)


@app.command()
def export(
    model: Path = typer.Argument(..., help="A model file, a train artifact directory, or an experiment YAML "
                                           "with --model."),
    format: Literal["ctranslate2", "huggingface"] = typer.Option(
        ..., "--format", "-f", help="ctranslate2: a CTranslate2 model directory (--quantization picks its weights); "
                     "huggingface: a MarianMTModel and its tokenizer, for Transformers."),
    output: Path = typer.Option(..., "--output", "-o", help="The directory to write."),
    model_name: Optional[str] = typer.Option(None, "--model", help="Which model of the experiment YAML."),
    quantization: Optional[str] = typer.Option(
        None, "--quantization", help="ctranslate2 weights: int8, int8_float32, int8_float16, int8_bfloat16, "
                                     "int16, float16, bfloat16 or float32 (default: float32)."),
    force: bool = typer.Option(False, "--force", help="Replace the output directory if an earlier nmt export wrote it "
                                                      "(never the working directory or the model's)."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
) -> None:
    """Export a trained model for CTranslate2 or Hugging Face Transformers, with its SentencePiece model(s)."""
    from pipeline.commands.export import export_files

    export_files(model, model_name, format, output, quantization, force, artifact_root, overrides)


@app.command()
def serve(
    model: Path = typer.Argument(..., help="A model file, a train artifact directory, or an experiment YAML "
                                           "with --model."),
    model_name: Optional[str] = typer.Option(None, "--model", help="Which model of the experiment YAML."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on. The default answers this machine only; 0.0.0.0 "
                                  "answers every interface (the API has no authentication: put it behind "
                                  "one that does)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port the HTTP API listens on."),
    backend: Literal["ours", "ctranslate2"] = typer.Option(
        "ours", "--backend", help="ours: the pipeline's beam search; ctranslate2: the model exported to "
                                  "CTranslate2 in each replica."),
    quantization: Optional[str] = typer.Option(None, "--quantization",
                                               help="ctranslate2 backend's weights: int8, float16, ..."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Ray Serve replicas of the model."),
    cpus_per_replica: float = typer.Option(1.0, "--cpus-per-replica", min=0.0,
                                           help="Ray CPUs per replica; also its decoding threads."),
    gpus_per_replica: float = typer.Option(0.0, "--gpus-per-replica", min=0.0, help="GPUs per replica."),
    max_sentences: int = typer.Option(64, "--max-sentences", min=1, help="Sentences a request may hold."),
    max_input_tokens: int = typer.Option(256, "--max-input-tokens", min=1,
                                         help="SentencePiece tokens a sentence may have (longer: HTTP 413)."),
    max_input_chars: int = typer.Option(2048, "--max-input-chars", min=1,
                                        help="Characters a sentence may have, checked before tokenizing "
                                             "(longer: HTTP 413)."),
    batch_deadline_s: float = typer.Option(30.0, "--batch-deadline-s", min=0.1,
                                           help="A batch costing --max-request-cost decoding longer is stopped "
                                                "(a costlier one gets proportionally longer): its decode process "
                                                "is restarted and its requests get HTTP 503."),
    max_request_cost: int = typer.Option(65_536, "--max-request-cost", min=1,
                                         help="Hypothesis steps a request may cost: beam_size x each sentence's "
                                              "output limit (max_length_a x its tokens + max_length_b), summed "
                                              "(more: HTTP 413)."),
    bulk_request_cost: int = typer.Option(8_192, "--bulk-request-cost", min=1,
                                          help="Requests costing more are decoded in a second process per replica "
                                               "at a lower priority, so they never hold up short ones; "
                                               "--max-request-cost or more: no such process."),
    max_batch_sentences: int = typer.Option(64, "--max-batch-sentences", min=1,
                                            help="Sentences of concurrent requests decoded as one batch."),
    normal_lane_ms: float = typer.Option(300.0, "--normal-lane-ms", min=1.0,
                                         help="Requests whose search may take longer than this on the replica's "
                                              "decoder (measured when it starts) go to the bulk lane too."),
    max_requests_in_flight: int = typer.Option(64, "--max-requests-in-flight", min=1,
                                               help="Short requests a replica holds, queued or decoding; more get "
                                                    "HTTP 503 with Retry-After at once."),
    max_bulk_requests_in_flight: int = typer.Option(4, "--max-bulk-requests-in-flight", min=1,
                                                    help="Costly requests (over --bulk-request-cost) a replica "
                                                         "holds; more get HTTP 503 with Retry-After at once."),
    body_deadline_s: float = typer.Option(10.0, "--body-deadline-s", min=0.1,
                                          help="A request body not received whole within this is cut (HTTP 408)."),
    batch_wait_ms: float = typer.Option(10.0, "--batch-wait-ms", min=0.0,
                                        help="How long a batch that is not full waits for more."),
    batch_max_wait_ms: Optional[float] = typer.Option(
        None, "--batch-max-wait-ms", min=0.0,
        help="How long a batch that holds fewer sentences than the last round had in flight waits for "
             "the rest (default: 150, or --batch-wait-ms if longer)."),
    ingress: Literal["ray", "haproxy"] = typer.Option(
        "ray", "--ingress", help="ray: Ray Serve's HTTP proxy; haproxy: Ray Serve's HAProxy ingress (less CPU a "
                                 "request; needs the haproxy binary)."),
    address: Optional[str] = typer.Option(None, "--address", envvar="RAY_ADDRESS",
                                          help="Ray cluster to join; default: start a local instance."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
) -> None:
    """Serve a trained model over HTTP (POST /translate, GET /health, /docs) with Ray Serve."""
    from pipeline.commands.serve import choose_ingress, serve_model

    choose_ingress(ingress, address)  # before Ray is imported or started
    from pipeline.commands.output import fail
    from pipeline.serving.app import ServiceSettings

    if batch_max_wait_ms is not None and batch_max_wait_ms < batch_wait_ms:
        fail(f"--batch-max-wait-ms {batch_max_wait_ms:g} is shorter than --batch-wait-ms {batch_wait_ms:g}", 2)
    if quantization is not None and backend != "ctranslate2":
        fail(f"--quantization {quantization}: only the ctranslate2 backend quantizes (add --backend ctranslate2)", 2)
    device = "cuda" if gpus_per_replica > 0 else "cpu"
    settings = ServiceSettings(backend=backend, quantization=quantization, device=device,
                               threads=max(1, int(cpus_per_replica)), max_sentences=max_sentences,
                               max_input_tokens=max_input_tokens, max_input_chars=max_input_chars,
                               batch_deadline_s=batch_deadline_s, max_request_cost=max_request_cost,
                               bulk_request_cost=bulk_request_cost, max_batch_sentences=max_batch_sentences,
                               normal_lane_s=normal_lane_ms / 1000, max_requests_in_flight=max_requests_in_flight,
                               max_bulk_requests_in_flight=max_bulk_requests_in_flight, body_deadline_s=body_deadline_s,
                               batch_wait_s=batch_wait_ms / 1000,
                               batch_max_wait_s=(max(ServiceSettings.batch_max_wait_s, batch_wait_ms / 1000)
                                                 if batch_max_wait_ms is None else batch_max_wait_ms / 1000))
    serve_model(model, model_name, host, port, replicas, cpus_per_replica, gpus_per_replica, settings, address,
                artifact_root, overrides)


@app.command("cluster-wait")
def cluster_wait(
    address: str = typer.Option(..., "--address", envvar="RAY_ADDRESS",
                                help="The head's GCS address, HOST:PORT (6379 by default)."),
    nodes: int = typer.Option(..., "--nodes", min=1, help="Nodes that must be alive, the head included."),
    timeout: float = typer.Option(300.0, "--timeout", min=1.0, help="Seconds to wait before failing."),
) -> None:
    """Wait until a Ray cluster's head answers and NODES nodes are alive; exit 1 with what
    is missing after TIMEOUT seconds, or at once where the head refuses the token
    (RAY_AUTH_TOKEN). For launch scripts (cluster/slurm.sbatch), instead of a fixed sleep."""
    from pipeline.cluster_address import ClusterUnreachable, wait_for_nodes
    from pipeline.commands.output import fail

    try:
        wait_for_nodes(address, nodes, timeout, report=typer.echo)
    except ClusterUnreachable as error:
        fail(str(error), 1)
