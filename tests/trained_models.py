"""Small models trained for a few hundred updates in this process (plain torch, no
Ray or DeepSpeed) and written as a train artifact's serving files: ``model.pt``,
``vocab.json`` and the SentencePiece model(s). Trained rather than freshly initialized
because an untrained model repeats one token, and comparing such outputs between
engines would prove little."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch


def train_briefly(tokenized: Path, output: Path, family: str, settings: dict | None = None, updates: int = 300,
                  max_tokens: int = 1500, seed: int = 0) -> Path:
    from stages.shared.inference.model_file import (
        build_for_vocabulary,
        save_model_file,
        vocabulary_facts,
    )
    from stages.shared.models.spec import ModelSpec
    from stages.train.data import TokenizedSplit
    from stages.shared.models.loss import translation_loss

    train = TokenizedSplit(tokenized, "train")
    facts = vocabulary_facts(tokenized, train.vocab)
    spec = ModelSpec(name=f"{family}_test", family=family, preset="tiny", settings=settings or {})
    torch.manual_seed(seed)
    model = build_for_vocabulary(spec, facts)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    rng = np.random.default_rng(seed)
    order = np.argsort(train.src_lengths + train.tgt_lengths, kind="stable")
    width = max(1, max_tokens // int(train.tgt_lengths.mean() + train.src_lengths.mean()))
    batches = [order[start:start + width] for start in range(0, len(order), width)]
    model.train()
    for step in range(updates):
        batch = train.batch(batches[rng.integers(len(batches))])
        loss, _ = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, step)
        optimizer.zero_grad()
        (loss / batch.tgt_lengths.sum()).backward()
        optimizer.step()
    output.mkdir(parents=True, exist_ok=True)
    save_model_file(output / "model.pt", spec, facts, model.state_dict(), {"updates": updates})
    for name in ("spm.model", "src.model", "tgt.model", "vocab.json"):
        if (tokenized / name).is_file():
            shutil.copyfile(tokenized / name, output / name)
    return write_manifest(output)


def write_manifest(directory: Path) -> Path:
    """A MANIFEST.json over the directory's files, as the artifact store commits one (a
    model file is loaded only beside the manifest that lists it); the directory."""
    import json

    from pipeline.core.artifacts import file_sha256

    files = {path.name: {"size": path.stat().st_size, "sha256": file_sha256(path)}
             for path in sorted(directory.iterdir()) if path.is_file() and path.name != "MANIFEST.json"}
    (directory / "MANIFEST.json").write_text(json.dumps({"files": files}))
    return directory
