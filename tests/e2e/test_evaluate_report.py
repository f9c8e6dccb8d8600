"""The whole graph on a Multi30k slice: training, evaluation, the report, MLflow, and
``nmt report`` / ``nmt translate`` on what it produced. One pipeline run is shared by
the module's tests."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from pipeline.core.artifacts import MANIFEST
from pipeline.cli import app
from pipeline.core.hardware import detect_device, resolve_precision
from stages.shared.inference.model_file import load_model_file
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator
from stages.shared.models.families import NAMES as FAMILIES
from stages.shared.models.families import family as family_record
from stages.report import write_report
from stages.report.records import load_record
from tests.helpers import slice_multi30k, small_config, write_config

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory, multi30k, local_ray):
    """The graph computed by ``nmt run CONFIG > log 2>&1`` (a process of its own, as a
    user runs it, its log in ``first.stdout``), then run again in this process."""
    root = tmp_path_factory.mktemp("graph")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("NMT_ARTIFACT_ROOT", str(root / "artifacts"))
        patch.setenv("NMT_CACHE_DIR", str(root / "cache"))
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        patch.delenv("NMT_PROGRESS", raising=False)  # a log file gets progress lines by itself
        # A bar's line every hour, not every 30 s: only its closing line in the log, so
        # that the log's length does not grow with how slow the machine is (a run that
        # took 6 minutes beside another test's training printed 210 lines). The periodic
        # lines have tests of their own (tests/unit/pipeline/test_progress_lines.py).
        patch.setenv("NMT_PROGRESS_SECONDS", "3600")
        corpus = slice_multi30k(multi30k, root / "corpus", {"train": 800, "val": 60, "test_2016_flickr": 30})
        # precision and peak FLOP/s left to the hardware: auto, and a measured peak.
        train = {"workers": 1, "max_tokens": 600, "warmup_steps": 20, "lr_scale": 2.0,
                 "max_steps": 30, "valid_every": 15, "checkpoint_every": 15, "log_every": 5}
        # ConvS2S at a quarter of the others' rate: at their peak (0.056) its loss rose from
        # 6.6 to 14.9 over the 30 updates; configs/smoke.yaml's peak of 0.018 trains it.
        own_train = {"convs2s": {"lr_scale": 0.5}}
        models = [{"name": f"{family}_tiny", "family": family, "preset": "tiny", "train": own_train.get(family, {})}
                  for family in FAMILIES]
        evaluate = {"batch_size": 8, "max_length_b": 20, "ctranslate2": "int8"}
        config = write_config(root / "exp.yaml", {**small_config(corpus), "train": train, "evaluate": evaluate,
                                                  "models": models})
        with open(root / "log", "w") as log:
            computed = subprocess.run([sys.executable, "-m", "pipeline", "run", str(config)], cwd=root, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=900)
        first = SimpleNamespace(exit_code=computed.returncode, stdout=(root / "log").read_text())
        assert first.exit_code == 0, first.stdout[-3000:]
        again = CliRunner().invoke(app, ["run", str(config)])
        assert again.exit_code == 0, again.output
        yield SimpleNamespace(root=root, config=config, first=first, again=again,
                              client=MlflowClient(f"sqlite:///{root / 'mlflow.db'}"))


def artifact(run, stage: str) -> Path:
    """The one committed artifact directory of ``stage``."""
    (directory,) = (run.root / "artifacts" / stage).iterdir()
    return directory


def stage_runs(run, prefix: str) -> dict:
    """The MLflow runs of the stages named ``prefix...`` in the first (computing) run."""
    experiment = run.client.get_experiment_by_name("test").experiment_id
    runs = {}
    for tracked in run.client.search_runs([experiment], order_by=["start_time ASC"]):
        stage = tracked.data.tags.get("nmt.stage", "")
        if stage.startswith(prefix):
            runs.setdefault(stage, tracked)
    return runs


def trained_under_auto() -> set[str]:
    """What train.precision auto may resolve to on this CPU: the faster of bf16 and fp32,
    measured, where bf16 is native (stages/train/precision_probe.py); else fp32."""
    return {"bf16", "fp32"} if detect_device("cpu").bf16 else {"fp32"}


def test_every_family_is_trained_evaluated_reported_and_tracked(pipeline_run):
    run = pipeline_run
    trained = stage_runs(run, "train/")
    assert set(trained) == {f"train/{family}_tiny" for family in FAMILIES}
    for name, tracked in trained.items():
        # The hardware facts: text ones as tags, the peak and MFU as metrics. Training
        # under auto: the faster of bf16 and fp32 where bf16 is native, measured, else fp32.
        assert tracked.data.tags["nmt.precision"] in trained_under_auto(), name
        assert tracked.data.tags["nmt.device_name"] == detect_device("cpu").name
        assert tracked.data.tags["nmt.peak_source"] == "measured"
        assert tracked.data.metrics["peak_flops_per_worker"] > 0 and tracked.data.metrics["mfu"] > 0
        # Live, at every logged row; and the stage's overall MFU at step 0 when it closes.
        mfu_steps = [m.step for m in run.client.get_metric_history(tracked.info.run_id, "mfu")]
        assert sorted(mfu_steps) == [0, 5, 10, 15, 20, 25, 30]
        history = run.client.get_metric_history(tracked.info.run_id, "train_loss")
        assert [m.step for m in history] == [5, 10, 15, 20, 25, 30], name
        assert history[-1].value < history[0].value, name
        assert tracked.data.metrics["best_valid_loss"] < math.log(500), name
        model, _ = load_model_file(artifact(run, name) / "model.pt")
        assert model.family == name.split("/")[1].removesuffix("_tiny")

    evaluated = stage_runs(run, "evaluate/")
    assert set(evaluated) == {f"evaluate/{family}_tiny" for family in FAMILIES}
    for name, tracked in evaluated.items():
        assert 0 < tracked.data.metrics["chrf"] <= 100 and tracked.data.metrics["sentences_per_second"] > 0
        logged = {a.path for a in run.client.list_artifacts(tracked.info.run_id)}
        assert {"hypotheses.txt", "hypotheses.greedy.txt", "reference.txt", "scores.json"} <= logged, name
    (report,) = stage_runs(run, "report").values()
    assert {"report.md", "appendix.md", "report.html", "report.csv", "report.json", "bleu_vs_flops.png"} <= {
        a.path for a in run.client.list_artifacts(report.info.run_id)}

    # The run prints the comparison (one row a model, BLEU with its interval); the rerun computes nothing.
    assert "BLEU [95%]" in run.first.stdout
    assert all(f"{family}_tiny" in run.first.stdout for family in FAMILIES)
    # The four data stages, each family's train and evaluate, the report.
    assert run.again.output.count("│ cached ") == 4 + 2 * len(FAMILIES) + 1


def sacrebleu_cli(references: Path, hypotheses: Path, *options: str) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-m", "sacrebleu", str(references), "-i", str(hypotheses),
                             "-m", "bleu", "chrf", "-w", "6", "--format", "json", *options],
                            capture_output=True, text=True, check=True)
    scores = json.loads(result.stdout)
    return {entry["name"]: entry["score"] for entry in scores}


def test_the_run_s_log_in_a_file_is_short_and_free_of_ray_internals(pipeline_run):
    """``nmt run CONFIG > log 2>&1`` over the whole graph (every stage and family):
    progress as lines, not bar redraws, and none of Ray's internal lines below WARNING
    (nor its known-benign ones)."""
    lines = pipeline_run.first.stdout.splitlines()
    assert len(lines) < 200, len(lines)
    core_below_warning = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+ [DI] \d+ \d+\] \S+\.cc:\d+:")
    assert [line for line in lines if core_below_warning.search(line) or "PreemptionWatcher" in line
            or "Reporting training result" in line or "\r" in line or "\x1b[A" in line] == []
    assert any("train transformer_tiny" in line and "done in" in line for line in lines)  # a bar's last line
    assert any(line.startswith("report: ") for line in lines)


@pytest.mark.parametrize("family", FAMILIES)
def test_stage_scores_equal_sacrebleu_run_on_the_written_files(pipeline_run, family):
    directory = artifact(pipeline_run, f"evaluate/{family}_tiny")
    scores = json.loads((directory / "scores.json").read_text())
    lines = (directory / "hypotheses.txt").read_text().splitlines()
    assert len(lines) == len((directory / "reference.txt").read_text().splitlines()) == scores["sentences"] == 30
    for prefix, hypotheses in (("", "hypotheses.txt"), ("greedy_", "hypotheses.greedy.txt")):
        cli = sacrebleu_cli(directory / "reference.txt", directory / hypotheses)
        assert scores[f"{prefix}bleu"] == pytest.approx(cli["BLEU"], abs=1e-4)
        assert scores[f"{prefix}chrf"] == pytest.approx(cli["chrF2"], abs=1e-4)
        lowercased = sacrebleu_cli(directory / "reference.txt", directory / hypotheses, "-lc")
        assert scores[f"{prefix}bleu_lc"] == pytest.approx(lowercased["BLEU"], abs=1e-4)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert scores["bleu_lc_signature"].startswith("nrefs:1|case:lc|eff:no|tok:13a")


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_flops_are_the_models_count_at_each_sentences_lengths(pipeline_run, family):
    from stages.shared.models.flops import decoding_flops

    directory = artifact(pipeline_run, f"evaluate/{family}_tiny")
    scores = json.loads((directory / "scores.json").read_text())
    translator = Translator.from_file(artifact(pipeline_run, f"train/{family}_tiny") / "model.pt")
    sources = translator.encode((directory / "source.txt").read_text().splitlines())
    best = [json.loads(line) for line in (directory / "nbest.jsonl").read_text().splitlines()]
    outputs = [entry["tokens"] for entry in best if entry["rank"] == 0]  # EOS included
    expected = [decoding_flops(translator.model, len(source), tokens, scores["beam_size"])
                for source, tokens in zip(sources, outputs, strict=True)]
    assert scores["decode_flops_per_sentence"] == pytest.approx(sum(expected) / len(expected))
    assert scores["decode_flops_per_sentence"] > decoding_flops(translator.model, 1, 1, 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_ctranslate2_decodes_the_families_it_runs_and_the_report_shows_it(pipeline_run, family):
    directory = artifact(pipeline_run, f"evaluate/{family}_tiny")
    scores = json.loads((directory / "scores.json").read_text())
    report = json.loads((artifact(pipeline_run, "report") / "report.json").read_text())
    (row,) = [row for row in report["models"] if row["name"] == f"{family}_tiny"]
    assert scores["ctranslate2_weights"] == row["ctranslate2_weights"] == "int8"
    if family_record(family).ctranslate2 is None:  # a family CTranslate2 cannot run: skipped, with the reason
        assert f"does not support the {family} family" in scores["ctranslate2_skipped"]
        assert "ctranslate2_bleu" not in scores and row["ctranslate2_bleu"] is None
        assert not (directory / "hypotheses.ctranslate2.txt").exists()
        return
    hypotheses = directory / "hypotheses.ctranslate2.txt"
    assert len(hypotheses.read_text().splitlines()) == scores["sentences"]
    assert scores["ctranslate2_bleu"] == pytest.approx(sacrebleu_cli(directory / "reference.txt", hypotheses)["BLEU"],
                                                       abs=1e-4)
    assert row["ctranslate2_bleu"] == scores["ctranslate2_bleu"]
    assert row["ctranslate2_sentences_per_second"] == scores["ctranslate2_sentences_per_second"] > 0


def test_beam_four_finds_higher_scoring_translations_than_greedy(pipeline_run):
    # The RNN: after 30 updates the tiny Transformer may still answer every sentence
    # alike (in fp32 it says "."), and then beam and greedy cannot differ.
    directory = artifact(pipeline_run, "evaluate/rnn_tiny")
    sources = (directory / "source.txt").read_text().splitlines()
    # In the precision the stage resolved (bf16 on an AMX CPU, fp32 elsewhere).
    precision = json.loads((directory / "scores.json").read_text())["precision"]
    translator = Translator.from_file(artifact(pipeline_run, "train/rnn_tiny") / "model.pt", precision=precision)
    beam = translator.translate(sources, SearchSettings(beam_size=4, max_length_b=20), batch_size=8)
    greedy = translator.translate(sources, SearchSettings(beam_size=1, max_length_b=20), batch_size=8)
    beam_mean = sum(line[0].hypothesis.score for line in beam) / len(beam)
    greedy_mean = sum(line[0].hypothesis.score for line in greedy) / len(greedy)
    assert beam_mean > greedy_mean
    # The stage decoded the same way: its hypotheses are these.
    assert [line[0].text for line in beam] == (directory / "hypotheses.txt").read_text().splitlines()


def test_report_flops_columns_agree_with_the_training_metrics(pipeline_run):
    report_dir = artifact(pipeline_run, "report")
    report = json.loads((report_dir / "report.json").read_text())
    with (report_dir / "report.csv").open() as handle:
        csv_rows = {row["name"]: row for row in csv.DictReader(handle)}
    assert [row["name"] for row in report["models"]] == [f"{family}_tiny" for family in FAMILIES]
    for row in report["models"]:
        metrics = json.loads((artifact(pipeline_run, f"train/{row['name']}") / MANIFEST).read_text())["metrics"]
        scores = json.loads((artifact(pipeline_run, f"evaluate/{row['name']}") / "scores.json").read_text())
        assert row["train_flops"] == metrics["train_flops"] > 0
        assert row["train_flops_6nd"] == metrics["train_flops_6nd"] > 0
        # The peak each worker measured in its precision: the one MFU and time x peak use.
        peak = metrics["peak_flops_per_worker"]
        assert row["peak_flops_per_worker"] == peak > 0 and row["peak_source"] == "measured"
        assert row["train_flops_paper"] == pytest.approx(metrics["train_seconds"] * 1 * peak)
        assert row["mfu"] == pytest.approx(metrics["flops_per_second"] / peak)
        resolved = resolve_precision("auto", detect_device("cpu"), "evaluate.precision")
        assert row["precision"] == metrics["precision"] in trained_under_auto()
        assert (metrics.get("precision_reason") is not None) == detect_device("cpu").bf16  # measured where native
        assert scores["precision"] == row["eval_precision"] == resolved
        assert row["device_name"] == scores["device_name"] == detect_device("cpu").name
        assert row["parameters"] == metrics["parameters"] and row["train_tokens"] == metrics["train_tokens"]
        assert row["bleu"] == scores["bleu"] and row["greedy_chrf"] == scores["greedy_chrf"]
        assert row["decode_flops_per_sentence"] == scores["decode_flops_per_sentence"] > 0
        assert float(csv_rows[row["name"]]["train_flops"]) == pytest.approx(row["train_flops"])
        assert csv_rows[row["name"]]["sacrebleu_signature"] == scores["bleu_signature"]
        assert len(report["curves"][row["name"]]) == 2  # validated at steps 15 and 30
    markdown = (report_dir / "report.md").read_text()
    assert all(f"| {family}_tiny " in markdown for family in FAMILIES)
    # The answer first: each budget's models (ranked, or listed as not translating) and the figure.
    first_screen = "\n".join(markdown.splitlines()[:40])
    assert "## At each budget" in first_screen and "![bleu_vs_flops.png](bleu_vs_flops.png)" in first_screen
    # The long tables are the appendix's: every run's row among them.
    assert "## Every run" not in markdown and "## Every run" in (report_dir / "appendix.md").read_text()
    # The report says which peak each model's MFU used and where it came from, once for
    # the models whose runs share it.
    assert re.search(r"^- [^\n]*\brnn_tiny\b[^\n]*: peak [^\n]*matmul probe", markdown, flags=re.M)
    assert "measured: " in markdown


def test_the_report_gates_models_that_do_not_translate_and_shows_the_source_blind_baselines(pipeline_run):
    """Thirty updates on 800 pairs do not make a translation model (configs/smoke.yaml's
    Transformer still used none of its source after 200): the evaluate stage measures
    source use and collapse, and the report keeps every model that fails out of every
    comparison, saying why."""
    from stages.shared import gate

    run = pipeline_run
    report_dir = artifact(run, "report")
    report = json.loads((report_dir / "report.json").read_text())
    for row in report["models"]:
        scores = json.loads((artifact(run, f"evaluate/{row['name']}") / "scores.json").read_text())
        assert scores["valid_nll_other_source"] - scores["valid_nll"] == pytest.approx(scores["source_use"])
        assert scores["source_use_sentences"] == 60 and 0 < scores["top_output_share"] <= 1
        assert row["source_use"] == scores["source_use"] and row["top_output_share"] == scores["top_output_share"]
        assert row["translates"] == gate.judge(row)[0]
    failing = {row["name"] for row in report["models"] if row["translates"] == gate.DOES_NOT}
    assert "transformer_tiny" in failing
    comparison = report["comparison"]
    assert {entry["label"] for entry in comparison["withheld"]} == failing
    assert not any({test["a"], test["b"]} & failing for test in comparison["tests"])
    markdown = (report_dir / "report.md").read_text()
    for name in failing:
        assert f"{name} did not translate at this budget (" in markdown
    header = markdown.split("## Does each model translate?")[1].strip().splitlines()[0]
    assert [cell.strip() for cell in header.strip("|").split("|")][:2] == ["model", "translates"]
    # The target side's n-gram models, fitted on the 800 training targets.
    baselines = comparison["baselines"]
    losses = [baselines["nats_per_token"][order] for order in ("1", "2", "3", "4")]
    assert baselines["train_sentences"] == 800 and baselines["valid_sentences"] == 60
    assert math.log(500) > losses[0] > losses[1] > losses[2] and losses[3] < losses[1]
    assert "## Source-blind baselines" in markdown and "| bigram " in markdown
    # The console opens with the answer: the failing model listed, not ranked, and why.
    assert "not ranked: does not translate" in run.first.stdout
    assert "did not translate at this budget" in run.first.stdout


def test_report_html_renders_in_a_browser_with_its_images_its_contents_and_no_errors(pipeline_run, browser):
    """report.html in headless Chromium: every image loads, every entry of the table of
    contents leads to its section, the answer comes first, and nothing errs."""
    report_dir = artifact(pipeline_run, "report")
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors, failed = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.goto((report_dir / "report.html").as_uri(), wait_until="load")
    images = page.eval_on_selector_all("img", "images => images.map(i => [i.getAttribute('src'), "
                                              "i.complete && i.naturalWidth > 100])")
    assert {source for source, _ in images} == {path.name for path in report_dir.glob("*.png")}
    assert all(loaded for _, loaded in images), images
    targets = page.eval_on_selector_all("nav a", "links => links.map(a => [a.textContent, "
                                                 "document.getElementById(a.getAttribute('href').slice(1))?.textContent])")
    assert targets and all(entry == heading for entry, heading in targets), targets
    assert page.text_content("h2") == "At each budget" == targets[0][0]
    assert not errors and not failed
    page.close()


def test_the_report_renders_with_any_subset_of_models(pipeline_run, tmp_path):
    report = json.loads((artifact(pipeline_run, "report") / "report.json").read_text())
    rnn = [load_record(row, "report.json") for row in report["models"] if row["family"] == "rnn"]
    written = write_report(rnn, {"rnn_tiny": report["curves"]["rnn_tiny"]}, tmp_path / "rnn", "only the RNN")
    assert {path.name for path in written} >= {"report.md", "bleu_vs_flops.png", "valid_loss_vs_time.png"}
    markdown = (tmp_path / "rnn" / "report.md").read_text()
    assert "rnn_tiny" in markdown and "transformer_tiny" not in markdown
    # Not evaluated, no curve, no peak FLOP/s: the table shows "-" and no BLEU plot is drawn.
    bare = dataclasses.replace(rnn[0], bleu=None, greedy_bleu=None, chrf=None, train_flops_paper=None, mfu=None)
    written = write_report([bare], {}, tmp_path / "bare", "bare")
    assert [path.name for path in written] == ["report.md", "appendix.md", "report.html", "report.csv", "report.json"]
    every_run = (tmp_path / "bare" / "appendix.md").read_text().split("## Every run")[1]
    table = [line for line in every_run.splitlines() if line.startswith("|")]
    cells = dict(zip([c.strip() for c in table[0].split("|")], [c.strip() for c in table[2].split("|")]))
    assert cells["BLEU beam"] == cells["MFU"] == cells["FLOPs time x peak"] == "-"
    assert cells["model"] == "rnn_tiny" and cells["FLOPs counted"] == f"{rnn[0]['train_flops']:.2e}"


def test_nmt_report_compares_configs_and_mlflow_runs(pipeline_run, tmp_path):
    run = pipeline_run
    experiment = run.client.get_experiment_by_name("test").experiment_id
    parents = [r for r in run.client.search_runs([experiment], order_by=["start_time ASC"])
               if "nmt.stage" not in r.data.tags]
    from_config = CliRunner().invoke(app, ["report", str(run.config), "-o", str(tmp_path / "config")])
    assert from_config.exit_code == 0, from_config.output
    # The first run trained everything; its MLflow records give the same table as the artifacts.
    from_mlflow = CliRunner().invoke(app, ["report", parents[0].info.run_id, "-o", str(tmp_path / "mlflow")])
    assert from_mlflow.exit_code == 0, from_mlflow.output
    by_config = json.loads((tmp_path / "config" / "report.json").read_text())
    by_mlflow = json.loads((tmp_path / "mlflow" / "report.json").read_text())
    assert by_mlflow["models"] == by_config["models"]
    assert by_mlflow["curves"] == by_config["curves"]
    # Both read the evaluations' outputs, so the intervals and tests are the report stage's.
    stage_report = json.loads((artifact(run, "report") / "report.json").read_text())
    tests = stage_report["comparison"]["tests"]
    assert by_config["comparison"]["tests"] == tests == by_mlflow["comparison"]["tests"]
    # The same gate from either source: the models that do not translate are withheld.
    withheld = stage_report["comparison"]["withheld"]
    assert withheld and by_config["comparison"]["withheld"] == withheld == by_mlflow["comparison"]["withheld"]
    assert by_config["comparison"]["intervals"] == stage_report["comparison"]["intervals"]

    both = CliRunner().invoke(app, ["report", str(run.config), parents[1].info.run_id, "-o", str(tmp_path / "both")])
    assert both.exit_code == 0, both.output
    names = [row["name"] for row in json.loads((tmp_path / "both" / "report.json").read_text())["models"]]
    assert len(names) == 2 * len(FAMILIES) and len(set(names)) == len(names) and "test/rnn_tiny" in names

    stage_run = stage_runs(run, "report")["report"].info.run_id
    wrong = CliRunner().invoke(app, ["report", stage_run, "-o", str(tmp_path / "wrong")])
    assert wrong.exit_code == 2 and "give the parent run" in wrong.output


def test_translate_prints_one_line_per_input_line_in_order(pipeline_run, tmp_path):
    run = pipeline_run
    sources = (artifact(run, "evaluate/transformer_tiny") / "source.txt").read_text().splitlines()
    hypotheses = (artifact(run, "evaluate/transformer_tiny") / "hypotheses.txt").read_text().splitlines()
    # Blank lines among the sentences, and an order unlike the stage's.
    picked = [sources[5], "", sources[0], "   ", sources[17], sources[3], "", "a line\u2028separator inside"]
    expected = [hypotheses[5], "", hypotheses[0], "", hypotheses[17], hypotheses[3], ""]
    (tmp_path / "input.en").write_text("\n".join(picked) + "\n")
    result = CliRunner().invoke(app, ["translate", str(run.config), "--model", "transformer_tiny", "--input",
                                      str(tmp_path / "input.en"), "--batch-size", "2", "--max-length-b", "20"])
    assert result.exit_code == 0, result.output
    output = result.stdout.removesuffix("\n").split("\n")
    assert len(output) == len(picked) and output[7]
    # Blank lines stay blank, in place. In batches of 2 rather than the stage's, a near
    # tie of this barely trained model may flip (with bf16, which auto picks on a CPU
    # that has it, more often): at most one of the four translated lines may differ.
    assert [i for i, line in enumerate(output[:7]) if not line] == [i for i, line in enumerate(expected) if not line]
    assert sum(mine != theirs for mine, theirs in zip(output[:7], expected)) <= 1, (output, expected)

    model_dir = artifact(run, "train/transformer_tiny")
    from_stdin = CliRunner().invoke(app, ["translate", str(model_dir), "--beam", "4", "--nbest", "2"],
                                    input="\n".join(sources[:3]) + "\n")
    assert from_stdin.exit_code == 0, from_stdin.output
    nbest = [line.split(" ||| ") for line in from_stdin.stdout.splitlines()]
    assert [int(index) for index, _, _ in nbest] == [0, 0, 1, 1, 2, 2]
    assert all(float(nbest[i][2]) >= float(nbest[i + 1][2]) for i in (0, 2, 4))

    missing = CliRunner().invoke(app, ["translate", str(tmp_path / "nothing.pt")])
    assert missing.exit_code == 2 and "no model file" in missing.output


@pytest.mark.parametrize("family", FAMILIES)
def test_translate_alignment_prints_one_line_per_input_line(pipeline_run, tmp_path, family):
    run = pipeline_run
    sources = (artifact(run, f"evaluate/{family}_tiny") / "source.txt").read_text().splitlines()
    picked = [sources[2], "", sources[7], sources[11]]
    (tmp_path / "input.en").write_text("\n".join(picked) + "\n")
    common = ["translate", str(run.config), "--model", f"{family}_tiny", "--input", str(tmp_path / "input.en"),
              "--max-length-b", "20"]
    plain = CliRunner().invoke(app, common)
    aligned = CliRunner().invoke(app, [*common, "--alignment"])
    assert aligned.exit_code == 0, aligned.output
    lines = aligned.stdout.removesuffix("\n").split("\n")
    assert len(lines) == len(picked)
    texts, alignments = zip(*(line.split(" ||| ") for line in lines))
    assert list(texts) == plain.stdout.removesuffix("\n").split("\n")  # the same translations
    assert alignments[1] == ""  # a blank line aligns nothing
    for source, text, alignment in zip(picked, texts, alignments):
        if not source:
            continue
        links = [tuple(map(int, link.split("-"))) for link in alignment.split()]
        target_words = len(text.split())
        # Every target word is aligned; indices stay inside both sentences (a source
        # word of SentencePiece may be split from its punctuation, hence the slack).
        assert {j for _, j in links} == set(range(target_words)) or not text
        assert all(0 <= i < len(source.split()) + 3 for i, _ in links)
    refused = CliRunner().invoke(app, [*common, "--alignment", "--beam", "4", "--nbest", "2"])
    assert refused.exit_code == 2 and "--nbest 1" in refused.output


@pytest.mark.parametrize("family, expected_maps", [("transformer", 2 * 4 * 3), ("rnn", 1), ("decoder_only", 4 * 4)])
def test_nmt_attention_writes_a_heatmap_per_layer_and_head_and_one_page(pipeline_run, tmp_path, family,
                                                                       expected_maps):
    out = tmp_path / "maps"
    result = CliRunner().invoke(app, ["attention", str(pipeline_run.config), "--model", f"{family}_tiny",
                                      "--input", "Two dogs play in the snow.", "-o", str(out)])
    assert result.exit_code == 0, result.output
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == expected_maps
    assert all(png.read_bytes().startswith(b"\x89PNG") for png in pngs)
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") == expected_maps  # self-contained
