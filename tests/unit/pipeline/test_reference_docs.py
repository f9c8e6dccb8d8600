"""The generated documentation pages (pipeline/reference_docs.py) match the code they
are generated from, and say what a reader needs of each key and option."""

from __future__ import annotations

import re

import pytest

from pipeline import reference_docs


@pytest.mark.parametrize("name", sorted(reference_docs.PAGES))
def test_the_committed_page_is_what_the_code_generates(name):
    committed = (reference_docs.DOCS / name).read_text()
    assert committed == reference_docs.PAGES[name](), \
        f"docs/{name} differs from the code: run python -m pipeline.reference_docs"


def test_the_configuration_page_is_headed_by_yaml_keys_with_yaml_defaults_and_every_rule():
    page = reference_docs.configuration_page()
    assert "\n## `train:`\n" in page and "\n## `evaluate:`\n" in page and "\n## `models[]:`\n" in page
    assert "## `download.train:`, `download.valid:`, `download.test:` with `type: tsv`" in page
    assert "| `max_tokens` | int, > 0 | `4096` | Tokens per batch and side on each worker" in page
    assert "| `precision` | `auto` \\| `fp32` \\| `bf16` \\| `fp16` | `auto` |" in page
    assert "| `train` | section \\| null | `null` |" in page  # YAML's null, not Python's None
    # A description written in a parent section (SearchSettings) reaches the evaluate table.
    evaluate = page.split("## `evaluate:`")[1].split("\n## ")[0]
    assert ("| `min_length` | int, >= 0, <= 1024 | `1` | Tokens before EOS may end a hypothesis (below each "
            "sentence's maximum). fairseq's default of 1") in evaluate
    # What each section's validators refuse, from the messages they raise.
    train = page.split("## `train:`")[1].split("\n## ")[0]
    for rule in ("- set at least one budget: max_steps, max_epochs, max_train_tokens, max_train_flops or max_wall_time",
                 "- average_last cannot exceed keep_checkpoints",
                 "- average_fraction ({average_fraction}) must be below decay_fraction ({decay_fraction})"):
        assert rule in train
    assert "- needs at least two distinct rates to choose among; got {value}" in page.split("## `tune:`")[1]


def test_every_key_has_a_description_and_none_says_python_s_none():
    rows = [line for line in reference_docs.configuration_page().splitlines()
            if line.startswith("| `")]
    empty = [row.split("|")[1].strip() for row in rows if not row.rstrip().rstrip("|").split("|")[-1].strip()]
    assert rows and not empty, f"keys without a description: {empty}"
    pythonic = [row for row in rows if re.search(r"\bNone\b", row)]
    assert not pythonic, pythonic  # a config says null


def test_validation_rules_are_the_raised_messages_with_values_named():
    class Example:
        def check(self):
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) exceeds high ({self.high})")
            raise ValueError("a plain " "message")

    assert reference_docs.validation_rules(Example) == ["low ({low}) exceeds high ({high})", "a plain message"]


def test_the_command_page_lists_every_command_and_its_options():
    page = reference_docs.cli_page()
    for command in ("run", "status", "verify", "report", "translate", "attention", "inspect", "export", "serve"):
        assert f"## `nmt {command}`" in page
    assert "| `--beam-size`, `--beam` | `4` | Beam size; 1 is greedy. |" in page
    globals_ = page.split("## Global options")[1].split("\n## ")[0]
    assert "| `--verbose`, `-v` |" in globals_ and "| `--version` |" in globals_
    export = page.split("## `nmt export`")[1].split("\n## ")[0]
    assert "| `--format`, `-f` | required | ctranslate2: " in export and "huggingface: " in export
    assert "| `--output`, `-o` | required |" in export
    assert "Environment: `NMT_ARTIFACT_ROOT`." in export
    serve = page.split("## `nmt serve`")[1].split("\n## ")[0]
    assert "| `--port` | `8000` | TCP port the HTTP API listens on. |" in serve


def test_source_comments_are_read_above_and_beside_a_field():
    class Example:
        # Why this default:
        # a second line.
        first: int = 1
        second: str = "x"  # beside it
        third: bool = True

    comments = reference_docs.source_comments(Example)
    assert comments == {"first": "Why this default: a second line.", "second": "beside it", "third": ""}
