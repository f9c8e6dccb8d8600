"""Helpers the tests share: paths, small files, Multi30k slices and configs over them.
Fixtures live in ``conftest.py``; these are plain functions, imported by name."""

from __future__ import annotations

import gzip
import hashlib
import os
import signal
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The directory holding multi30k/ (docs/running.md, the offline corpus directory):
# NMT_CORPORA, else corpora/ in the repository (ignored by git).
CORPORA = Path(os.environ.get("NMT_CORPORA") or REPO / "corpora")
MULTI30K = CORPORA / "multi30k"
# The first lines of it, checked in (tests/data/multi30k/README.md): what unit tests read.
MULTI30K_SAMPLE = REPO / "tests" / "data" / "multi30k"


def shipped_config(name: str) -> dict:
    """A config of ``configs/`` as raw YAML data, to edit before writing it back out."""
    return yaml.safe_load((REPO / "configs" / name).read_text())


def run_stage(stage_run, inputs: dict[str, Path], config, output: Path) -> dict:
    """Call a stage's ``run`` directly, as the runner would, into a fresh ``output``."""
    from pipeline.core.context import StageContext

    output.mkdir()
    return stage_run(inputs, config, output, StageContext())


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_lines(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def slice_multi30k(multi30k: Path, directory: Path, lines: dict[str, int]) -> Path:
    """Copy the first N lines of each Multi30k split (en and de) as plain text."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in lines.items():
        for lang in ("en", "de"):
            with gzip.open(multi30k / f"{split}.{lang}.gz", "rt", encoding="utf-8") as handle:
                head = [next(handle).rstrip("\n") for _ in range(count)]
            write_lines(directory / f"{split}.{lang}", head)
    return directory


def files_source(directory: Path, split: str) -> dict:
    return {"type": "files", "src": {"path": str(directory / f"{split}.en")},
            "tgt": {"path": str(directory / f"{split}.de")}}


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def small_config(corpus_dir: Path, **sections) -> dict:
    """A config over a Multi30k slice made by slice_multi30k, with tiny BPE."""
    config = {
        "name": "test",
        "download": {"src_lang": "en", "tgt_lang": "de",
                     "train": files_source(corpus_dir, "train"),
                     "valid": files_source(corpus_dir, "val"),
                     "test": files_source(corpus_dir, "test_2016_flickr")},
        "bpe": {"vocab_size": 500},
        "tokenize": {"shards": 2},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def clean_slice(multi30k: Path, root: Path, lines: dict[str, int]) -> Path:
    """Download and clean stages, called directly, on a slice of Multi30k: the clean artifact."""
    from pipeline.core.context import StageContext
    from stages import clean, download
    from stages.clean.config import CleanConfig
    from stages.download.config import DownloadConfig

    corpus = slice_multi30k(multi30k, root / "corpus", lines)
    config = DownloadConfig.model_validate({"src_lang": "en", "tgt_lang": "de",
                                            "train": files_source(corpus, "train"),
                                            "valid": files_source(corpus, "val"),
                                            "test": files_source(corpus, "test_2016_flickr")})
    (root / "download").mkdir()
    download.run({}, config, root / "download", StageContext())
    (root / "clean").mkdir()
    clean.run({"download": root / "download"}, CleanConfig(), root / "clean", StageContext())
    return root / "clean"


def smoke_briefly(max_steps: int, one_model: bool = False) -> list[str]:
    """Settings that train the smoke graph briefly (``max_steps`` updates a model,
    validated and checkpointed every 10, no greedy decoding): for runs about launching
    or faults, not about training. ``one_model``: its Transformer alone, for a launch
    whose subject is the job, not the four families (test_evaluate_report.py's)."""
    settings = [f"train.max_steps={max_steps}", "train.valid_every=10", "train.checkpoint_every=10",
                "train.valid_bleu_every=null", "train.warmup_steps=10", "evaluate.greedy=false"]
    return settings + ([ONE_MODEL] if one_model else [])


ONE_MODEL = "models=[{name: transformer_tiny, family: transformer, preset: tiny}]"


def set_options(settings: list[str]) -> list[str]:
    """``settings`` as ``nmt run`` options: ``--set KEY=VALUE`` each."""
    return [word for setting in settings for word in ("--set", setting)]


def processes_naming(text: str) -> list[str]:
    """Running processes whose command line contains ``text``, each as "PID command":
    what a test that must leave nothing behind finds left."""
    import psutil

    left = []
    for process in psutil.process_iter():
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:  # ended, or a zombie, while looked at
            continue
        if text in command:
            left.append(f"{process.pid} {command[:100]}")
    return left


def kill_everything_below(process) -> None:
    """SIGKILL ``process`` (a ``subprocess.Popen`` started in a session of its own), its
    process group and every process below it, and wait until they are gone: what a
    machine that dies does to a run. Killing the group alone leaves Ray's actors and
    workers, which Ray starts in sessions of their own, training for a few seconds
    more; a rerun started meanwhile found the killed run still writing checkpoints."""
    import psutil

    below = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGKILL)
    for child in below:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait()
    psutil.wait_procs(below, timeout=30)


def run_on_a_terminal(command: list[str], columns: int = 120, timeout: float = 900, **popen) -> tuple[int, str]:
    """``command`` with its stdout and stderr on a pseudo-terminal ``columns`` wide, as
    a user at a terminal runs it; its exit status and everything it wrote there, the
    carriage returns and escape codes of redrawn bars included."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    # The terminal's size, not one a CI job exports (rich takes COLUMNS over the terminal's).
    env = {name: value for name, value in popen.pop("env", os.environ).items() if name not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, **popen)
    os.close(follower)
    written, deadline = bytearray(), time.time() + timeout
    try:
        while time.time() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: every process that held the terminal has closed it
                    break
                if not chunk:
                    break
                written += chunk
            elif process.poll() is not None:  # ended, and what it wrote is read
                break
    finally:
        os.close(leader)
    try:
        code = process.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    return code, written.decode(errors="replace")  # each \r kept: a redraw


def as_displayed(output: str, columns: int = 120) -> list[str]:
    """What a terminal ``columns`` wide shows after ``output``: the lines scrolled off
    its top, then its screen, each as it was left (redrawn, erased, overwritten)."""
    import pyte

    screen = pyte.HistoryScreen(columns, 40, history=100_000, ratio=0.001)
    pyte.Stream(screen).feed(output)
    scrolled = ["".join(line[column].data for column in range(columns)).rstrip() for line in screen.history.top]
    return scrolled + [line.rstrip() for line in screen.display]


def comparison_of(**parts):
    """A report's ``Comparison`` with only ``parts`` (records) given and the rest empty,
    as the report's tables and plots take it."""
    from stages.report.comparison_records import Comparison

    empty = dict(groups=[], intervals={}, tests=[], primary=[], withheld=[], unchecked=[], repeated_seeds={},
                 alpha=0.05, agreement={}, laws=[], law_crossovers=[], isoflop=[])
    return Comparison(**{**empty, **parts})


def group_summary(label: str, bleu: float, **fields):
    """A ``GroupSummary`` (a configured model at a budget, its seeds together) named
    ``label`` with mean test BLEU ``bleu``, ``fields`` given and the rest neutral: three
    seeds that translate, no other score."""
    from stages.report.comparison_records import GroupSummary, Spread

    unscored = Spread(mean=None, std=None, each=[])
    neutral = dict(label=label, model=label, family=label, budget=None, preset=None, parameters=None,
                   non_embedding_parameters=None, seeds=[1, 2, 3], train_flops=0.0, train_tokens=None,
                   short_of_budget=[], bleu=Spread(mean=bleu, std=None, each=[]), chrf=unscored, valid_loss=unscored,
                   diverged_seeds=[], translates="yes", not_translating=None, source_use=unscored)
    return GroupSummary(**{**neutral, **fields})


def system_interval(score: float, low: float, high: float):
    """A ``SystemInterval``: ``score`` within [``low``, ``high``], three seeds measured."""
    from stages.report.comparison_records import SacrebleuInterval, SystemInterval

    return SystemInterval(score=score, seed_variance_measured=True, standard_error=(high - low) / 4, df=4.0,
                          low=low, high=high, seeds=3, sacrebleu=SacrebleuInterval(mean=score, ci=0.0))


def paired_test(**fields):
    """A ``PairedTest`` with ``fields`` given and the rest neutral: a primary BLEU test of
    a against b with three seeds a side, measured, not yet adjusted."""
    from stages.report.comparison_records import Agreement, PairedTest

    agreement = Agreement(percent=50.0, bound="at most")
    neutral = dict(a="a", b="b", metric="BLEU", role="primary", seeds=[3, 3], seed_variance_measured=True,
                   seed_share=None, repeated_seeds={}, a_score=20.0, b_score=20.0, delta=0.0, delta_low=-1.0,
                   delta_high=1.0, standard_error=0.5, df=4.0, p=1.0, detectable=2.0, p_bootstrap=1.0,
                   p_randomization=None, p_bootstrap_sacrebleu=1.0, p_randomization_sacrebleu=None,
                   agreement=agreement, agreement_low=agreement, agreement_high=agreement)
    return PairedTest(**{**neutral, **fields})


def nmt(*args: str):
    """``nmt ARGS...`` in this process (typer's CliRunner); an exception other than the
    command's exit is raised as it was."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result
