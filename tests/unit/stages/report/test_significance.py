"""Intervals and paired tests are sacreBLEU's: the same files give the numbers its
command line prints (``--confidence``, ``--paired-bs``, ``--paired-ar``)."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stages.report.significance import PRACTICAL_DELTA, System, confidence_intervals, paired_tests

SAMPLE = Path(__file__).parents[3] / "data" / "multi30k" / "test_2016_flickr.de.gz"
# The command-line flags of each metric, as sacreBLEU names them.
CLI_METRICS = {"BLEU": ["-m", "bleu"], "chrF": ["-m", "chrf"], "chrF++": ["-m", "chrf", "--chrf-word-order", "2"]}


def degraded(references: list[str], rate: float, seed: int) -> list[str]:
    """Each reference with about ``rate`` of its words dropped: a system of some quality."""
    generator = random.Random(seed)
    return [" ".join(word for word in line.split() if generator.random() > rate) or line for line in references]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    references = gzip.open(SAMPLE, "rt", encoding="utf-8").read().splitlines()[:200]
    directory = tmp_path_factory.mktemp("systems")
    paths = {"ref": directory / "ref.txt", "a": directory / "a.txt", "b": directory / "b.txt"}
    for name, lines in (("ref", references), ("a", degraded(references, 0.2, 1)), ("b", degraded(references, 0.3, 2))):
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def sacrebleu(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "sacrebleu", *args, "-w", "4"], check=True, capture_output=True,
                          text=True, env={"SACREBLEU_SEED": "12345", "PATH": ""}).stdout


def test_the_intervals_are_what_sacrebleu_confidence_prints(files):
    ours = confidence_intervals(System("a", lines(files["a"]), lines(files["ref"])))
    for metric, flags in CLI_METRICS.items():
        printed = json.loads(sacrebleu(str(files["ref"]), "-i", str(files["a"]), *flags, "--confidence", "-f",
                                       "json"))
        assert ours[metric]["score"] == pytest.approx(printed["score"], abs=5e-5)
        assert ours[metric]["mean"] == pytest.approx(printed["confidence_mean"], abs=5e-5)
        assert ours[metric]["ci"] == pytest.approx(printed["confidence_var"], abs=5e-5)


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_the_p_values_are_what_sacrebleu_paired_tests_print(files, test):
    a = System("a", lines(files["a"]), lines(files["ref"]))
    b = System("b", lines(files["b"]), lines(files["ref"]))
    ours = {row["metric"]: row for row in paired_tests([a, b])}
    for metric, flags in CLI_METRICS.items():
        printed = sacrebleu(str(files["ref"]), "-i", str(files["a"]), str(files["b"]), *flags, f"--paired-{test}",
                            "-f", "text")
        p_value = float(re.search(r"\(p = ([0-9.]+)\)", printed).group(1))
        key = "p_bootstrap" if test == "bs" else "p_randomization"
        assert round(ours[metric][key], 4) == pytest.approx(p_value, abs=1e-9), metric
        scores = [float(value) for value in re.findall(r"│\s+([0-9]+\.[0-9]{4})", printed)[:2]]
        assert ours[metric]["delta"] == pytest.approx(scores[1] - scores[0], abs=2e-4)


def test_a_clear_difference_is_significant_and_practical_and_a_slight_one_is_neither(files):
    references, hypotheses = lines(files["ref"]), lines(files["a"])
    a = System("a", hypotheses, references)
    worse = System("worse", degraded(references, 0.6, 3), references)
    # Four sentences of 200 translated otherwise. (A system against itself is not the
    # case to try: sacreBLEU, after MultEval, counts only larger differences, so a zero
    # difference gets the smallest p-value.)
    slightly = System("slightly", degraded(references, 0.3, 4)[:4] + hypotheses[4:], references)
    rows = paired_tests([a, worse, slightly], bootstrap_samples=200, randomization_trials=500)
    verdicts = {(row["a"], row["b"], row["metric"]): row for row in rows}
    assert len(rows) == 3 * 3  # three pairs, three metrics
    clear = verdicts[("a", "worse", "BLEU")]
    assert clear["delta"] < -PRACTICAL_DELTA["BLEU"] and clear["significant"] and clear["practical"]
    slight = verdicts[("a", "slightly", "chrF")]
    assert abs(slight["delta"]) < PRACTICAL_DELTA["chrF"] and not slight["significant"] and not slight["practical"]


def test_systems_scored_on_other_references_are_not_paired(files):
    references = lines(files["ref"])
    one_seed = System("one", lines(files["a"]), references)
    two_seeds = System("two", lines(files["a"]) + lines(files["b"]), references * 2)
    assert paired_tests([one_seed, two_seeds], bootstrap_samples=10, randomization_trials=10) == []
