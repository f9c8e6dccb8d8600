"""The generated documentation pages (pipeline/reference_docs.py) match the code they
are generated from, and say what a reader needs of each key and option."""

from __future__ import annotations

import pytest

from pipeline import reference_docs


@pytest.mark.parametrize("name", sorted(reference_docs.PAGES))
def test_the_committed_page_is_what_the_code_generates(name):
    committed = (reference_docs.DOCS / name).read_text()
    assert committed == reference_docs.PAGES[name](), \
        f"docs/{name} differs from the code: run python -m pipeline.reference_docs"


def test_the_configuration_page_gives_every_key_its_type_default_and_description():
    page = reference_docs.configuration_page()
    assert "| `max_tokens` | int | `4096` | Tokens per batch and side on each worker" in page
    assert "| `precision` | `auto` \\| `fp32` \\| `bf16` \\| `fp16` | `'auto'` |" in page
    # A description written in a parent section (SearchSettings) reaches EvaluateConfig's table.
    evaluate = page.split("## `EvaluateConfig`")[1].split("## ")[0]
    assert ("| `min_length` | int | `1` | Tokens before EOS may end a hypothesis (below each sentence's maximum). "
            "fairseq's default of 1") in evaluate


def test_the_command_page_lists_every_command_and_its_options():
    page = reference_docs.cli_page()
    for command in ("run", "status", "verify", "report", "translate", "attention", "inspect", "export", "serve"):
        assert f"## `nmt {command}`" in page
    assert "| `--beam-size`, `--beam` | `4` | Beam size; 1 is greedy. |" in page


def test_source_comments_are_read_above_and_beside_a_field():
    class Example:
        # Why this default:
        # a second line.
        first: int = 1
        second: str = "x"  # beside it
        third: bool = True

    comments = reference_docs.source_comments(Example)
    assert comments == {"first": "Why this default: a second line.", "second": "beside it", "third": ""}
