"""nmt export: the exported models translate as ours do, quantized ones score as well,
and what a format cannot hold is refused with the reason."""

from __future__ import annotations

import gzip
import json
import random
import statistics

import pytest
import sacrebleu
import sentencepiece as spm
import torch

from stages.shared.export import ExportError, export_model
from stages.shared.export.marian import marian_dimension_order
from stages.shared.models.families import FAMILIES, NAMES
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator
from tests.trained_models import train_briefly

pytestmark = pytest.mark.trains  # trains models and decodes them with CTranslate2

GREEDY = SearchSettings(beam_size=1, max_length_b=40)


@pytest.fixture(scope="module")
def sentences(multi30k) -> list[str]:
    with gzip.open(multi30k / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(50)]


@pytest.fixture(scope="module")
def references(multi30k) -> list[str]:
    with gzip.open(multi30k / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(50)]


@pytest.fixture(scope="module")
def post_ln_transformer(tokenized, tmp_path_factory):
    """The paper's layout: post-LN, sinusoidal positions."""
    return train_briefly(tokenized, tmp_path_factory.mktemp("post_ln"), "transformer")


@pytest.fixture(scope="module")
def pre_ln_transformer(tokenized, tmp_path_factory):
    """The other layout CTranslate2 takes: pre-LN with final LayerNorms, learned positions."""
    return train_briefly(tokenized, tmp_path_factory.mktemp("pre_ln"), "transformer",
                         {"pre_norm": True, "learned_positions": True})


@pytest.fixture(params=["post_ln_transformer", "pre_ln_transformer"])
def transformer(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def decoder_only(tokenized, tmp_path_factory):
    return train_briefly(tokenized, tmp_path_factory.mktemp("decoder_only"), "decoder_only", {"ae_loss": False})


def ours(model_dir, sentences: list[str]) -> list[tuple[int, ...]]:
    """Our greedy translations, as token ids."""
    return [t[0].hypothesis.tokens for t in Translator.from_file(model_dir).translate(sentences, GREEDY)]


def same_as_ours(our_tokens: list[tuple[int, ...]], their_tokens: list[list[int]]) -> None:
    """Every translation the same tokens; where ours stopped at the length cap (no EOS
    within source + 40), theirs may run on but must start the same."""
    assert len(our_tokens) == len(their_tokens)
    for index, (mine, theirs) in enumerate(zip(our_tokens, their_tokens)):
        assert tuple(theirs[:len(mine)]) == mine, f"sentence {index}: {mine} != {theirs}"
    finished = sum(len(mine) == len(theirs) for mine, theirs in zip(our_tokens, their_tokens))
    assert finished >= len(our_tokens) // 2  # the comparison is not all prefixes


def ctranslate2_greedy(exported, sentences: list[str], threads: int = 1) -> list[list[int]]:
    import ctranslate2

    info = json.loads((exported / "nmt_export.json").read_text())
    processor = spm.SentencePieceProcessor(model_file=str(exported / info["src_spm"]))
    tokens = processor.encode(sentences, out_type=str)
    if info["family"] == "decoder_only":
        generator = ctranslate2.Generator(str(exported), intra_threads=threads)
        before, after = info["prompt"]["before_source"], info["prompt"]["after_source"]
        results = generator.generate_batch([before + t + after for t in tokens], beam_size=1, max_length=200,
                                           include_prompt_in_result=False)
        pieces = [r.sequences[0] for r in results]
    else:
        translator = ctranslate2.Translator(str(exported), intra_threads=threads)
        pieces = [r.hypotheses[0] for r in translator.translate_batch(tokens, beam_size=1, max_decoding_length=200)]
    return [[processor.piece_to_id(piece) for piece in hypothesis] for hypothesis in pieces]


@pytest.mark.parametrize("model", ["post_ln_transformer", "decoder_only"])
def test_ctranslate2_honours_each_sentence_s_output_limit_and_the_minimum_length(request, model, sentences):
    """As our search does: at most max_length_a x |x| + max_length_b tokens with EOS (so
    one fewer before it), per sentence, and none shorter than min_length."""
    from stages.shared.inference.ctranslate2_translator import CTranslate2Translator

    model_dir = request.getfixturevalue(model)
    engine, ours = CTranslate2Translator(model_dir), Translator.from_file(model_dir)
    sources = ours.encode(sentences[:12])
    short = SearchSettings(beam_size=2, max_length_a=0.5, max_length_b=2)
    for source, translations in zip(sources, engine.translate_batch(sources, short)):
        limit = short.output_length_limit(len(source))
        assert len(translations[0].hypothesis.tokens) <= limit - 1
    lengths = {len(t[0].hypothesis.tokens) for t in engine.translate_batch(sources, short)}
    assert len(lengths) > 1  # the limits differ by sentence, and so do the outputs
    long = SearchSettings(beam_size=2, min_length=9, max_length_b=30)
    assert all(len(t[0].hypothesis.tokens) >= 9 for t in engine.translate_batch(sources, long))
    greedy_short = SearchSettings(beam_size=1, max_length_a=0.5, max_length_b=2)
    theirs = [t[0].hypothesis.tokens for t in engine.translate_batch(sources, greedy_short)]
    assert theirs == [t[0].hypothesis.tokens for t in ours.translate_ids(sources, greedy_short)]


def test_ctranslate2_export_translates_as_ours(transformer, sentences, tmp_path):
    exported = export_model(transformer, "ctranslate2", tmp_path / "ct2")
    assert {"model.bin", "config.json", "spm.model", "nmt_export.json"} <= {p.name for p in exported.iterdir()}
    same_as_ours(ours(transformer, sentences), ctranslate2_greedy(exported, sentences))


def test_the_decoder_only_model_exports_as_a_ctranslate2_generator_that_translates_as_ours(decoder_only, sentences,
                                                                                         tmp_path):
    exported = export_model(decoder_only, "ctranslate2", tmp_path / "ct2")
    same_as_ours(ours(decoder_only, sentences), ctranslate2_greedy(exported, sentences))


def test_huggingface_export_loads_offline_and_translates_as_ours(post_ln_transformer, sentences, tmp_path,
                                                                 monkeypatch):
    from transformers import AutoTokenizer, MarianMTModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exported = export_model(post_ln_transformer, "huggingface", tmp_path / "hf")
    tokenizer = AutoTokenizer.from_pretrained(exported)
    model = MarianMTModel.from_pretrained(exported).eval()
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    our_tokens = ours(post_ln_transformer, sentences)
    assert batch["input_ids"][0][: batch["attention_mask"][0].sum()].tolist() == \
        Translator.from_file(post_ln_transformer).encode(sentences[:1])[0]
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=200)
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    theirs = [[t for t in row[1:].tolist() if t not in (eos, pad)] for row in generated]  # after the start token
    same_as_ours(our_tokens, theirs)


def paired_bootstrap_spread(first: list[str], second: list[str], references: list[str], samples: int = 300) -> float:
    """The standard deviation of BLEU(first) - BLEU(second) over resamplings of the
    sentences (the same resampled sentences for both, seeded): how far the difference
    moves with which sentences happen to be in the set."""
    rng = random.Random(0)
    differences = []
    for _ in range(samples):
        drawn = [rng.randrange(len(references)) for _ in references]
        refs = [[references[i] for i in drawn]]
        differences.append(sacrebleu.corpus_bleu([first[i] for i in drawn], refs).score
                           - sacrebleu.corpus_bleu([second[i] for i in drawn], refs).score)
    return statistics.stdev(differences)


def test_int8_scores_as_float32_within_the_test_set_s_spread(post_ln_transformer, sentences, references, tmp_path):
    """int8 weights lose no BLEU that 50 sentences can show: the difference stays within
    2.58 standard deviations (99%) of its own paired bootstrap, a bound measured on this
    machine's outputs, not fitted to one CPU's kernels."""
    scores, outputs = {}, {}
    for quantization in ("float32", "int8"):
        exported = export_model(post_ln_transformer, "ctranslate2", tmp_path / quantization, quantization)
        processor = spm.SentencePieceProcessor(model_file=str(exported / "spm.model"))
        outputs[quantization] = [processor.decode(ids) for ids in ctranslate2_greedy(exported, sentences)]
        scores[quantization] = sacrebleu.corpus_bleu(outputs[quantization], [references]).score
    assert scores["float32"] > 1.0  # a model that translates something, or the bound says nothing
    spread = paired_bootstrap_spread(outputs["int8"], outputs["float32"], references)
    assert abs(scores["int8"] - scores["float32"]) <= 2.58 * spread, (scores, spread)
    # int8 weights: a quarter of the bytes of the matrices (embeddings and all)
    assert (tmp_path / "int8" / "model.bin").stat().st_size < 0.6 * (tmp_path / "float32" / "model.bin").stat().st_size


def test_our_sinusoids_in_marians_dimension_order_are_marians():
    from transformers.models.marian.modeling_marian import (
        MarianSinusoidalPositionalEmbedding,
    )

    from stages.shared.models.layers import sinusoidal_table

    marian = MarianSinusoidalPositionalEmbedding(64, 32)
    assert torch.allclose(sinusoidal_table(64, 32)[:, marian_dimension_order(32)], marian.create_weight(), atol=1e-6)


@pytest.mark.parametrize("family, settings, format, message", [
    ("rnn", {}, "ctranslate2", "does not support the rnn family"),
    ("rnn", {}, "huggingface", "does not support the rnn family"),
    ("decoder_only", {}, "huggingface", "use --format ctranslate2"),
    ("transformer", {"pre_norm": True}, "huggingface", "MarianMTModel is post-LN"),
    ("transformer", {"learned_positions": True}, "huggingface", "positions are fixed sinusoids"),
    ("decoder_only", {"prefix_attention": True}, "ctranslate2", "prefix_attention"),
])
def test_what_a_format_cannot_hold_is_refused_and_leaves_no_directory(tokenized, tmp_path, family, settings,
                                                                      format, message):
    model = train_briefly(tokenized, tmp_path / "model", family, settings, updates=1)
    with pytest.raises(ExportError, match=message):
        export_model(model, format, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging directory left behind


@pytest.mark.parametrize("family", FAMILIES, ids=NAMES)
def test_every_family_exports_to_ctranslate2_or_is_refused_naming_it_and_what_holds_it(family):
    """Read from the family list: a family with a CTranslate2 converter passes the check,
    one without is refused before anything is written, naming itself and the formats
    that hold it."""
    from stages.shared.export import check_format
    from stages.shared.models.build import build_model

    model = build_model(family.name, "tiny", {}, 40, 40)
    if family.ctranslate2 is not None:
        check_format(model, "ctranslate2")
        return
    with pytest.raises(ExportError, match=f"does not support the {family.name} family.*formats that hold this model"):
        check_format(model, "ctranslate2")


def test_force_replaces_an_earlier_export_and_nothing_else(tokenized, tmp_path, monkeypatch):
    model = train_briefly(tokenized, tmp_path / "model", "transformer", updates=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(ExportError, match="already exists"):
        export_model(model, "ctranslate2", tmp_path / "out")
    with pytest.raises(ExportError, match="is not an earlier export"):
        export_model(model, "ctranslate2", tmp_path / "out", force=True)
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"
    # Under a file: one line naming it (mkdir gave a FileExistsError traceback).
    with pytest.raises(ExportError, match=r"mine\.txt is a file, not a directory"):
        export_model(model, "ctranslate2", tmp_path / "out" / "mine.txt" / "sub" / "deeper")

    export_model(model, "ctranslate2", tmp_path / "exported")
    (tmp_path / "exported" / "stale.txt").write_text("from the earlier export")
    export_model(model, "ctranslate2", tmp_path / "exported", force=True)
    assert (tmp_path / "exported" / "model.bin").is_file() and not (tmp_path / "exported" / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "model", "out"]  # nothing left aside


@pytest.mark.parametrize("where", ["working directory", "its parent", "model directory"])
def test_force_refuses_the_working_directory_its_parents_and_the_model(tokenized, tmp_path, monkeypatch, where):
    model = train_briefly(tokenized, tmp_path / "work" / "model", "transformer", updates=1)
    monkeypatch.chdir(tmp_path / "work")
    target = {"working directory": ".", "its parent": "..", "model directory": "model"}[where]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ExportError, match="never replaces"):
        export_model(model, "ctranslate2", tmp_path / "work" / target, force=True)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_bad_quantization_and_format_are_named(tokenized, tmp_path):
    model = train_briefly(tokenized, tmp_path / "model", "transformer", updates=1)
    with pytest.raises(ExportError, match="unknown quantization 'int4'"):
        export_model(model, "ctranslate2", tmp_path / "out", "int4")
    with pytest.raises(ExportError, match="unknown format 'onnx'"):
        export_model(model, "onnx", tmp_path / "out")
    with pytest.raises(ExportError, match="applies to the ctranslate2 format"):
        export_model(model, "huggingface", tmp_path / "out", "int8")


def test_nmt_serves_ctranslate2_backend_translates_as_its_own_backend(transformer, sentences):
    """What nmt serve --backend ctranslate2 runs: the export made in the replica."""
    from pipeline.serving.backends import open_backend
    from stages.shared.inference.model_file import ModelFiles, SourceEncoder

    greedy = SearchSettings(beam_size=1, nbest=1, max_length_b=40)
    ours_backend = open_backend(transformer, "ours", "cpu", 1, precision="fp32")
    ct2_backend = open_backend(transformer, "ctranslate2", "cpu", 1)
    assert (ours_backend.name, ct2_backend.name) == ("ours", "ctranslate2")
    sources = SourceEncoder.of(ModelFiles.find(transformer)).encode(sentences)  # what a replica encodes with
    assert sources == Translator.from_file(transformer).encode(sentences)  # what nmt translate reads
    mine = [translations[0].text for translations in ours_backend.translate_batch(sources, greedy)]
    theirs = [translations[0].text for translations in ct2_backend.translate_batch(sources, greedy)]
    # Where ours stopped at the length cap, CTranslate2's cap (the batch's longest source
    # + 40) may let it run on: the same text, continued.
    assert all(their.startswith(my) for my, their in zip(mine, theirs)), list(zip(mine, theirs))
    assert sum(my == their for my, their in zip(mine, theirs)) >= len(sentences) // 2
