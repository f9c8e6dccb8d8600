"""docs/models.md's table of the frontier presets' parameters is what the families'
parameter layouts count (the counts ``nmt inspect`` prints), for the settings and the
1,000-piece joint vocabulary of configs/multi30k_frontier.yaml."""

from __future__ import annotations

import re

from pipeline.commands.inspect import _count as shown  # as nmt inspect prints a count
from pipeline.config import load_config
from stages.shared.models.families import family
from tests.helpers import REPO

VOCABULARY = 1000  # configs/multi30k_frontier.yaml's bpe.vocab_size, joint
WIDTHS = ["w4", "w8", "w16", "w32", "w64"]


def test_the_frontier_presets_table_gives_the_counted_parameters():
    settings = {model.family: model.settings for model in load_config(REPO / "configs" / "multi30k_frontier.yaml").models}
    rows = {cells[0]: cells for cells in (
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in (REPO / "docs" / "models.md").read_text().splitlines()
        if re.match(r"\| (transformer|decoder_only|rnn|convs2s) \|", line))}
    assert sorted(rows) == sorted(settings), rows
    for name, cells in rows.items():
        record = family(name)
        counts = [record.parameter_layout(record.resolve(width, settings[name]), VOCABULARY, VOCABULARY).counts()
                  for width in WIDTHS]
        assert cells[2:7] == [shown(count["non_embedding"]) for count in counts], (name, cells)
        assert cells[7] == f"{shown(counts[0]['total'])} to {shown(counts[-1]['total'])}", (name, cells)
