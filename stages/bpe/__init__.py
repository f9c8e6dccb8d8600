"""bpe: train SentencePiece BPE on the cleaned training text.

A joint source+target vocabulary is the default, as in Vaswani et al. (2017), section
5.1 ("a shared source-target vocabulary of about 37000 tokens"), which lets the
Transformer share its embedding matrices. ``joint: false`` trains one model per side.

On a big corpus the models train on a sample of ``input_sentence_size`` sentences, drawn
with the config's seed. The stage reads the training split a row group at a time and
keeps only the sampled sentences, so its memory is bounded by the sample, not by the
corpus. Below that size every sentence is used, as SentencePiece would.

Output: ``spm.model`` (joint) or ``src.model`` and ``tgt.model``, their ``.vocab``
files, and ``vocab.json``: which model each side uses, the special-token ids and the
language-tag tokens (``__en__``), which decoder-only models put before each side.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import sentencepiece as spm

import stages.clean as clean_artifact
from pipeline.core.context import StageContext
from stages.bpe.config import BpeConfig
from stages.shared.errors import InputDataError
from stages.shared.pair_files import count_rows

# 2: the sample of a big corpus is drawn here, not by SentencePiece; 3: the model
# without the temporary paths SentencePiece records (the same key, the same bytes)
VERSION = 3
# Fixed ids so every model and every run agrees: padding is 0, as torch's embedding
# and loss code assume by default.
SPECIAL_IDS = {"pad": 0, "unk": 1, "bos": 2, "eos": 3}


def read_vocab(artifact: Path) -> dict:
    """``vocab.json`` of a bpe artifact, or of a tokenize or train artifact (which carry
    a copy): the model file of each side, the special-token ids, the language tags."""
    return json.loads((artifact / "vocab.json").read_text())


def language_tag(language: str) -> str:
    return f"__{language}__"


def run(inputs: dict[str, Path], config: BpeConfig, output: Path, ctx: StageContext) -> dict:
    clean = inputs["clean"]
    src_lang, tgt_lang = clean_artifact.read_languages(clean)
    train_file = clean_artifact.pairs_file(clean, "train")
    tags = [language_tag(src_lang), language_tag(tgt_lang)] if config.language_tags else []
    symbols = tags + [s for s in config.user_symbols if s not in tags]
    with tempfile.TemporaryDirectory() as scratch:
        if config.joint:
            text = Path(scratch) / "joint.txt"
            sampled = write_sample(train_file, ("src", "tgt"), config.input_sentence_size, config.seed, text)
            _train_model(text, output / "spm", config, symbols)
            models = {"src": "spm.model", "tgt": "spm.model"}
        else:
            for side in ("src", "tgt"):
                text = Path(scratch) / f"{side}.txt"
                sampled = write_sample(train_file, (side,), config.input_sentence_size, config.seed, text)
                _train_model(text, output / side, config, symbols)
            models = {"src": "src.model", "tgt": "tgt.model"}
    sizes = {side: spm.SentencePieceProcessor(model_file=str(output / name)).get_piece_size()
             for side, name in models.items()}
    vocab = {"joint": config.joint, "models": models, "sizes": sizes, "special_ids": SPECIAL_IDS,
             "language_tags": {src_lang: tags[0], tgt_lang: tags[1]} if tags else {},
             "src_lang": src_lang, "tgt_lang": tgt_lang}
    (output / "vocab.json").write_text(json.dumps(vocab, indent=2))
    return {"vocab_size_src": sizes["src"], "vocab_size_tgt": sizes["tgt"],
            "train_sentences": count_rows(train_file), "sampled_sentences": sampled}


def write_sample(pairs_file: Path, columns: tuple[str, ...], size: int, seed: int, text: Path) -> int:
    """Write ``size`` sentences drawn uniformly without replacement from the given
    columns of a pairs file (all of them, column after column, if there are no more),
    one per line, in file order; the number written.

    The file is read a row group at a time, and only the drawn sentences become Python
    strings, so memory follows ``size``, not the corpus.
    """
    parquet = pq.ParquetFile(pairs_file)
    rows = parquet.metadata.num_rows
    lines = rows * len(columns)
    if lines <= size:
        chosen = np.arange(lines)
    else:
        chosen = np.sort(np.random.default_rng(seed).choice(lines, size=size, replace=False))
    with open(text, "w", encoding="utf-8") as handle:
        for number, column in enumerate(columns):
            wanted = chosen[(chosen >= number * rows) & (chosen < (number + 1) * rows)] - number * rows
            offset = 0
            for group in range(parquet.metadata.num_row_groups):
                group_rows = parquet.metadata.row_group(group).num_rows
                local = wanted[(wanted >= offset) & (wanted < offset + group_rows)] - offset
                if len(local):
                    values = parquet.read_row_group(group, columns=[column]).column(0)
                    handle.writelines(line + "\n" for line in values.take(local).to_pylist())
                offset += group_rows
    return len(chosen)


def _train_model(text: Path, prefix: Path, config: BpeConfig, user_symbols: list[str]) -> None:
    # Sentence sampling is random; a fixed seed makes the same config give the same model.
    spm.set_random_generator_seed(config.seed)
    try:
        spm.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=str(prefix),
            model_type="bpe",
            vocab_size=config.vocab_size,
            character_coverage=config.character_coverage,
            # Sampling bounds memory and time on big corpora (WMT14 has 4.5M pairs).
            input_sentence_size=config.input_sentence_size,
            shuffle_input_sentence=True,
            pad_id=SPECIAL_IDS["pad"], unk_id=SPECIAL_IDS["unk"],
            bos_id=SPECIAL_IDS["bos"], eos_id=SPECIAL_IDS["eos"],
            user_defined_symbols=user_symbols,
            num_threads=config.threads,
            minloglevel=2,
        )
    except RuntimeError as error:
        raise InputDataError(f"bpe: SentencePiece could not train on {text.name}: {error} "
                             "(for a small corpus, lower bpe.vocab_size)") from None
    _clear_paths(prefix.with_suffix(".model"))


def _clear_paths(model_file: Path) -> None:
    """SentencePiece records its input file and output prefix in the model: temporary
    paths, different on every run. Cleared, so that the same key is the same bytes."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_file.read_bytes())
    del proto.trainer_spec.input[:]
    proto.trainer_spec.model_prefix = ""
    model_file.write_bytes(proto.SerializeToString())
