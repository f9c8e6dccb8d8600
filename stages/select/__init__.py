"""select: each configured model's best candidate at every budget, chosen on the
selection seeds.

Its inputs are the candidate runs (``train/<model>.<size>.lr<rate>.<budget>.s<seed>``,
one per size, peak rate, budget and selection seed, trained as any run of the
experiment) and the cleaned validation split. For each run it reads the final
validation loss from the run's curve and measures the model's source use on the
validation split (``stages/shared/translation_check.py``, with its standard error);
the test set is never decoded, so no choice sees it. ``choice.py`` then chooses at each
budget the candidate with the lowest mean final validation loss among those all of whose
seeds translate (``stages/shared/gate.py`` on source use), notes where the choice sits at
an edge of the sizes or rates tried, and, while ``extensions_left``, names the
candidates the next round adds there.

The artifact: ``choice.json`` (``artifact.SelectionChoice``). The orchestration
(``pipeline/selection.py``) reads it for the next round's candidates or, settled, for
the runs that confirm the choice on the experiment's seeds; the report shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.core.context import StageContext
from pipeline.core.hardware import cpus_of_this_task
from stages.clean import read_split
from stages.select.artifact import CHOICE_FILE, SelectionChoice, read_selection
from stages.select.choice import Measured, choose, extensions
from stages.select.config import SelectStageConfig
from stages.shared.inference.model_file import MODEL_FILES, weights_file
from stages.shared.names import TRAIN, train_stage
from stages.train.artifact import CURVE_FILE, read_curve

__all__ = ["VERSION", "READS", "MLFLOW_FILES", "run", "read_selection"]

VERSION = 1
# Of each candidate's train artifact: its curve and what loading the model reads.
READS = {TRAIN: (CURVE_FILE, *MODEL_FILES)}
MLFLOW_FILES = (CHOICE_FILE,)


def run(inputs: dict[str, Path], config: SelectStageConfig, output: Path, ctx: StageContext) -> dict:
    # Imported here: torch loads only when the stage runs, not with its config.
    import torch

    from stages.shared.inference.translator import Translator
    from stages.shared.translation_check import source_use_on

    torch.set_num_threads(cpus_of_this_task())
    valid = read_split(inputs["clean"], "valid")
    sources, references = valid.column("src").to_pylist(), valid.column("tgt").to_pylist()
    measured = []
    bar = ctx.progress(total=len(config.runs), desc=f"select {config.model}", unit="run")
    for candidate in config.runs:
        artifact = inputs[train_stage(candidate.run)]
        losses = [row["valid_loss"] for row in read_curve(artifact) if "valid_loss" in row]
        translator = Translator.from_file(weights_file(artifact), "cpu", "fp32")
        use = source_use_on(translator, sources, references)
        measured.append(Measured(size=candidate.size, lr=candidate.lr, budget=candidate.budget, seed=candidate.seed,
                                 valid_loss=losses[-1] if losses else None, source_use=use.get("source_use"),
                                 source_use_error=use.get("source_use_error")))
        bar.update(1)
    bar.close()
    choices = choose(measured, config.budgets, config.ladder)
    extend = extensions(choices, config.ladder) if config.extensions_left else []
    choice = SelectionChoice(model=config.model, seeds=sorted({run.seed for run in config.runs}),
                             metric="final validation loss", budgets=choices, extend=extend,
                             extensions_left=config.extensions_left)
    (output / CHOICE_FILE).write_text(json.dumps(choice.to_json(), indent=2))
    return {"candidates": len({(run.size, run.lr) for run in config.runs}), "runs": len(config.runs),
            "extend": len(extend),
            "chosen": "; ".join(f"{c.budget:.2g}: {c.size} lr {c.lr:g}" if c.size else f"{c.budget:.2g}: none"
                                for c in choices)}
