"""The GPU campaign's summary: each target, the value measured against it, and whether
it is met, from the files benchmarks/gpu_check.sh leaves in its results folder(s).

    python benchmarks/gpu/gpu_summary.py RESULTS_DIR [RESULTS_DIR ...]

Several folders (one per phase's job) make one table; a step that did not
run in any of them is "not run".
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

WU_BLEU = 41.0  # Wu et al. (2021), Transformer-Tiny, test2016, lowercased
WU_UPDATES = 8000
# (shape, least MFU against the datasheet peak, least speed-up over MarianMTModel)
THROUGHPUT = (("base", 0.30, 1.2), ("big", 0.40, 1.2))  # the train stage's MFU; ours against Marian
STEP_OVERHEAD = 1.10  # the train stage's step against the plain step
VARIANTS = ("ours", "ours, DeepSpeed", "ours, compiled")


class Results:
    """The files of one or more results folders, read as one."""

    def __init__(self, folders: list[Path]):
        self.folders = folders
        self.steps: dict[str, dict] = {}
        for folder in folders:
            table = folder / "steps.tsv"
            if table.is_file():
                for line in table.read_text().splitlines()[1:]:
                    phase, step, status, seconds = line.split("\t")
                    self.steps[step] = {"phase": phase, "status": int(status), "seconds": int(seconds)}

    def file(self, name: str) -> Path | None:
        found = [folder / name for folder in self.folders if (folder / name).is_file()]
        return found[-1] if found else None

    def member(self, archive: str, name: str) -> str | None:
        """A file inside one of the folders' tar archives (logs.tar.gz, wu_run.tar.gz)."""
        for folder in reversed(self.folders):
            path = folder / archive
            if not path.is_file():
                continue
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.name.endswith("/" + name) or member.name == name:
                        return tar.extractfile(member).read().decode("utf-8", "replace")
        return None

    def log(self, step: str) -> str:
        return self.member("logs.tar.gz", f"{step}.log") or ""


def step_row(results: Results, step: str, target: str, detail: str = "") -> tuple[str, str, str]:
    found = results.steps.get(step)
    if found is None:
        return target, "not run", "-"
    ok = found["status"] == 0
    timed_out = found["status"] in (124, 137)
    state = "ok" if ok else ("timed out" if timed_out else f"failed (exit {found['status']})")
    return target, f"{state}, {found['seconds']} s" + (f"; {detail}" if detail else ""), "yes" if ok else "no"


def test_counts(log: str) -> str:
    counts = re.findall(r"(\d+) (passed|failed|skipped|errors?)", log.splitlines()[-1] if log.strip() else "")
    return ", ".join(f"{n} {what}" for n, what in counts)


def product_rows(results: Results) -> list[tuple[str, str, str]]:
    rows = [step_row(results, "gpu_tests", "tests marked gpu pass", test_counts(results.log("gpu_tests")))]
    rows.append(step_row(results, "product_run",
                         "`nmt run` on CUDA: Ray Train, bf16 autocast, DeepSpeed over NCCL, checkpoints, evaluate on CUDA"))
    rows.append(step_row(results, "tiny_throughput", "Transformer-Tiny step time, eager and compiled (for wu)"))
    rows.append(step_row(results, "product_translate", "`nmt translate --device cuda`"))
    serve = results.log("product_serve")
    seconds = re.search(r'"request_seconds": ([\d.]+)', serve)
    rows.append(step_row(results, "product_serve", "`nmt serve`, one GPU replica, answers a POST",
                         f"request {float(seconds.group(1)):.2f} s" if seconds else ""))
    rows.append(step_row(results, "product_mlflow", "every train stage a FINISHED MLflow run"))
    return rows


def wu_rows(results: Results) -> list[tuple[str, str, str]]:
    if "wu_run" not in results.steps:
        return [("Wu et al. (2021) recipe, lowercased BLEU on test2016", "not run", "-")]
    hypotheses, references = results.member("wu_run.tar.gz", "hypotheses.txt"), \
        results.member("wu_run.tar.gz", "reference.txt")
    report = results.member("wu_run.tar.gz", "train_report.json")
    updates = ""
    if report:
        data = json.loads(report)
        metrics = data["metrics"]
        updates = (f"{metrics['steps']:,} of {WU_UPDATES:,} updates ({data['stop_reason']}), "
                   f"{metrics['train_seconds'] / 60:.1f} min training, {metrics['tokens_per_second']:,.0f} tokens/s")
    if not hypotheses or not references:
        return [step_row(results, "wu_run", f"Wu et al. recipe: lowercased BLEU >= {WU_BLEU}", updates)]
    from sacrebleu.metrics import BLEU

    lines, refs = hypotheses.splitlines(), references.splitlines()
    lowercased = BLEU(lowercase=True).corpus_score(lines, [refs]).score
    cased = BLEU().corpus_score(lines, [refs]).score
    return [(f"Wu et al. recipe on one GPU: lowercased BLEU >= {WU_BLEU} (test2016, beam 5)",
             f"{lowercased:.2f} (cased {cased:.2f}); {updates}", "yes" if lowercased >= WU_BLEU else "no")]


def throughput_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("train_throughput.json")
    if path is None:
        return [("training throughput, base and big, bf16, 25k tokens", "not run", "-")]
    data = json.loads(path.read_text())
    rows = {(row["shape"], row["model"]): row for row in data["rows"]}
    out = []
    for shape, mfu, speedup in THROUGHPUT:
        variants = {name: rows.get((shape, name)) for name in VARIANTS if rows.get((shape, name))}
        if not variants or "mfu_datasheet" not in next(iter(variants.values())):
            continue
        stage = variants.get("ours, DeepSpeed")
        cells = ", ".join(f"{name} {row['mfu_datasheet']:.1%}" for name, row in variants.items())
        out.append((f"{shape}: the train stage's engine at MFU >= {mfu:.0%} of the datasheet's bf16 peak", cells,
                    "-" if stage is None else "yes" if stage["mfu_datasheet"] >= mfu else "no"))
        cells = ", ".join(f"{name} {row['vs_marian']:.2f}x" for name, row in variants.items())
        fastest = max(row["vs_marian"] for row in variants.values())
        out.append((f"{shape}: >= {speedup}x MarianMTModel's tokens/s", cells, "yes" if fastest >= speedup else "no"))
    return out or [("training throughput", "no GPU rows (a CPU run)", "-")]


def step_overhead_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("step_overhead.json")
    if path is None:
        return [("the train stage's step against the plain step", "not run", "-")]
    rows = json.loads(path.read_text())["rows"]
    plain = {(row["shape"], row["precision"]): row for row in rows if row["row"] == "plain"}
    out = []
    for row in rows:
        if row["row"] == "plain":
            continue
        base = plain[(row["shape"], row["precision"])]
        target = (f"{row['shape']} {row['precision']}: {row['row']}'s step within {STEP_OVERHEAD:.2f}x of the "
                  "plain step" if row["row"] == "train stage" else f"{row['shape']} {row['precision']}: {row['row']}")
        measured = (f"{row['vs_plain']:.2f}x ({1000 * row['seconds_per_step']:.1f} against "
                    f"{1000 * base['seconds_per_step']:.1f} ms), {row['aten_ops']:,} against {base['aten_ops']:,} ATen "
                    f"ops, {row['host_syncs']} host syncs, {row['synchronize']} synchronize() a step")
        met = ("yes" if row["vs_plain"] <= STEP_OVERHEAD else "no") if row["row"] == "train stage" else "-"
        out.append((target, measured, met))
    return out


def sharing_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("gpu_sharing.json")
    if path is None:
        return [("runs of a small model sharing one GPU", "not run", "-")]
    rows = json.loads(path.read_text())
    cells = ", ".join(f"{row['runs']} at once {row['vs_one_run']:.2f}x" for row in rows)
    eight = [row for row in rows if row["runs"] >= 8]
    met = "-" if not eight else "yes" if max(row["vs_one_run"] for row in eight) > 1 else "no"
    return [(f"{rows[0]['size']} runs sharing one {rows[0]['device']}: total tokens/s against one run alone",
             cells, met)]


def checkpoint_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("checkpoint_cost.json")
    if path is None:
        return [("a weights-only snapshot against a resumable checkpoint", "not run", "-")]
    rows = json.loads(path.read_text())["rows"]
    full = {row["shape"]: row for row in rows if row["kind"] == "checkpoint"}
    cells = ", ".join(f"{row['shape']} {row['seconds']:.2f} s against {full[row['shape']]['seconds']:.2f} s, "
                      f"{row['bytes'] / full[row['shape']]['bytes']:.2f}x the bytes"
                      for row in rows if row["kind"] == "snapshot")
    return [("a weights-only snapshot against a resumable checkpoint", cells, "-")]


def compile_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("compile_cost.json")
    if path is None:
        return [("train.compile in the train stage's update", "not run", "-")]
    rows = json.loads(path.read_text())["rows"]
    cells = "; ".join(
        f"{row['family']} {row['preset']}: {row['compiled_seconds_per_update'] / row['eager_seconds_per_update']:.2f}x "
        f"eager's time an update, {row['graphs']} graph(s), {row['compiling_seconds']:.0f} s compiling"
        + (f", paid back after {row['updates_to_pay_back']:,.0f} updates" if row["updates_to_pay_back"] else "")
        for row in rows)
    return [("train.compile in the train stage's update: compiled against eager", cells, "-")]


def decode_rows(results: Results) -> list[tuple[str, str, str]]:
    path = results.file("decode_speed.txt")
    if path is None:
        return [("decoding: ours against CTranslate2", "not run", "-")]
    rates: dict[tuple[str, int], float] = {}
    failed = []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) >= 3 and cells[1].isdigit():
            if cells[2].startswith("failed"):
                failed.append(f"{cells[0]}: {cells[2]}")
                continue
            rates[(cells[0], int(cells[1]))] = float(cells[2].replace(",", ""))
    out = []
    for batch in sorted({b for _, b in rates}):
        ours = max((rate for (name, b), rate in rates.items() if b == batch and name.startswith("ours")), default=None)
        theirs = {name: rate for (name, b), rate in rates.items() if b == batch and name.startswith("CTranslate2")}
        cells = [f"ours (fastest) {ours:,.0f} sent/s" if ours else "ours: no row"]
        cells += [f"{name} {rate:,.0f} ({rate / ours:.2f}x ours)" for name, rate in theirs.items() if ours]
        out.append((f"decoding, beam 4, batch {batch}", "; ".join(cells), "-"))
    if failed:
        out.append(("engines that could not run", "; ".join(sorted(set(failed)))[:300], "-"))
    return out or [("decoding on CUDA", "no rows", "-")]


def main() -> None:
    folders = [Path(arg) for arg in sys.argv[1:]]
    results = Results(folders)
    environment = results.file("environment.txt")
    if environment:
        print("Machine: " + "; ".join(line.strip() for line in environment.read_text().splitlines()[:2]))
        print()
    rows = (product_rows(results) + wu_rows(results) + step_overhead_rows(results) + sharing_rows(results)
            + checkpoint_rows(results) + compile_rows(results) + throughput_rows(results) + decode_rows(results))
    phases: dict[str, int] = {}
    for step in results.steps.values():
        phases[step["phase"]] = phases.get(step["phase"], 0) + step["seconds"]
    rows.append(("the campaign's steps, in seconds per phase",
                 ", ".join(f"{phase} {seconds} s" for phase, seconds in phases.items()) or "none", "-"))
    print("| target | measured | met |\n|---|---|---|")
    for target, measured, met in rows:
        print(f"| {target} | {measured} | {met} |")


if __name__ == "__main__":
    main()
