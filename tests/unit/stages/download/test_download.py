"""The download stage: sources, pinned downloads, mirrors, archives, bad input."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import tarfile
import time
import zipfile

import pyarrow.parquet as pq
import pytest

from pipeline.core.context import DownloadSources, StageContext
from stages import download
from stages.download.config import DownloadConfig, FileRef
from stages.download.locate import locate_file
from stages.shared.errors import InputDataError
from tests.helpers import write_lines
from tests.loopback_http import LoopbackFileServer

EN = ["A dog runs.", "Two men talk.", "A girl sings."]
DE = ["Ein Hund rennt.", "Zwei Männer reden.", "Ein Mädchen singt."]


def _files(src, tgt, **extra):
    return {"type": "files", "src": {"path": str(src)}, "tgt": {"path": str(tgt)}, **extra}


def _download(tmp_path, train, valid=None, test=None, mirrors=()):
    config = DownloadConfig.model_validate({"src_lang": "en", "tgt_lang": "de", "train": train,
                                            "valid": valid or train, "test": test or train})
    output = tmp_path / "out"
    output.mkdir(exist_ok=True)
    ctx = StageContext(resources=DownloadSources(list(mirrors), tmp_path / "downloads"))
    return download.run({}, config, output, ctx), output


def _pairs(output, split="train"):
    table = pq.read_table(output / f"{split}.parquet")
    return list(zip(table.column("src").to_pylist(), table.column("tgt").to_pylist()))


def test_plain_and_gzip_line_files_become_pairs(tmp_path):
    src = write_lines(tmp_path / "train.en.gz", EN, gz=True)
    tgt = write_lines(tmp_path / "train.de", DE)
    metrics, output = _download(tmp_path, _files(src, tgt))
    assert _pairs(output) == list(zip(EN, DE))
    assert metrics["train_pairs"] == 3
    assert json.loads((output / "meta.json").read_text())["splits"]["train"]["alignment"] == "line"


def test_max_pairs_takes_the_first_pairs(tmp_path):
    src, tgt = write_lines(tmp_path / "a.en", EN), write_lines(tmp_path / "a.de", DE)
    _, output = _download(tmp_path, _files(src, tgt, max_pairs=2))
    assert _pairs(output) == list(zip(EN, DE))[:2]


def test_max_pairs_still_compares_both_files_to_the_end(tmp_path):
    """A line missing in the middle of one file misaligns every later pair: max_pairs
    below the line counts must not hide it."""
    src = write_lines(tmp_path / "a.en", [f"sentence {i}" for i in range(10)])
    tgt = write_lines(tmp_path / "a.de", [f"Satz {i}" for i in range(10) if i != 5])
    with pytest.raises(InputDataError, match=f"differ in length: {src} has 10 lines, {tgt} has 9"):
        _download(tmp_path, _files(src, tgt, max_pairs=3))


def test_max_pairs_still_checks_the_unused_lines_encoding(tmp_path):
    src = write_lines(tmp_path / "a.en", EN)
    tgt = tmp_path / "a.de"
    tgt.write_bytes("Ein Hund rennt.\nZwei M\u00e4nner\n".encode() + b"Ein M\xe4dchen singt.\n")
    with pytest.raises(InputDataError, match=r"a\.de: line 3: invalid UTF-8"):
        _download(tmp_path, _files(src, tgt, max_pairs=1))


def test_tsv_columns(tmp_path):
    tsv = write_lines(tmp_path / "train.tsv", [f"id{i}\t{d}\t{e}" for i, (e, d) in enumerate(zip(EN, DE))])
    _, output = _download(tmp_path, {"type": "tsv", "file": {"path": str(tsv)}, "src_column": 2, "tgt_column": 1})
    assert _pairs(output) == list(zip(EN, DE))


def test_tsv_line_with_too_few_columns_is_named(tmp_path):
    tsv = write_lines(tmp_path / "train.tsv", ["a\tb", "only one column"])
    with pytest.raises(InputDataError, match=r"train\.tsv: line 2: 1 tab-separated columns, need 2"):
        _download(tmp_path, {"type": "tsv", "file": {"path": str(tsv)}})


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    src = write_lines(tmp_path / "train.en", EN)
    tgt = write_lines(tmp_path / "train.de", DE + ["Noch einer.", "Und noch einer."])
    with pytest.raises(InputDataError) as error:
        _download(tmp_path, _files(src, tgt))
    assert f"differ in length: {src} has 3 lines, {tgt} has 5" in str(error.value)


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write_lines(tmp_path / "train.en", EN)
    tgt = tmp_path / "train.de"
    tgt.write_bytes("Ein Hund rennt.\nZwei M\u00e4nner\n".encode() + b"Ein M\xe4dchen singt.\n")
    with pytest.raises(InputDataError, match=r"train\.de: line 3: invalid UTF-8 \(byte 0xe4 at column 6\)"):
        _download(tmp_path, _files(src, tgt))


def test_empty_corpus_is_an_error(tmp_path):
    src, tgt = write_lines(tmp_path / "e.en", []), write_lines(tmp_path / "e.de", [])
    with pytest.raises(InputDataError, match=r"download\.train: the source has no sentence pairs"):
        _download(tmp_path, _files(src, tgt))


def test_missing_local_file(tmp_path):
    src = write_lines(tmp_path / "train.en", EN)
    with pytest.raises(InputDataError, match=r"nope\.de: input file not found"):
        _download(tmp_path, _files(src, tmp_path / "nope.de"))


def test_document_aligned_files_keep_documents_together(tmp_path):
    src = write_lines(tmp_path / "d.en", ["One.", "Two.", "", "Three."])
    tgt = write_lines(tmp_path / "d.de", ["Eins.", "Zwei.", "", "Drei."])
    _, output = _download(tmp_path, _files(src, tgt, alignment="document"))
    assert _pairs(output) == [("One.\nTwo.", "Eins.\nZwei."), ("Three.", "Drei.")]


def test_huggingface_local_dataset_directory_in_wmt_layout(tmp_path):
    import datasets

    rows = [{"translation": {"en": e, "de": d}} for e, d in zip(EN, DE)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "hf"))
    _, output = _download(tmp_path, {"type": "huggingface", "dataset": str(tmp_path / "hf"), "split": "train"})
    assert _pairs(output) == list(zip(EN, DE))


def test_huggingface_data_files_with_named_fields_streaming(tmp_path):
    (tmp_path / "hfjson").mkdir()
    lines = [json.dumps({"english": e, "german": d}) for e, d in zip(EN, DE)]
    write_lines(tmp_path / "hfjson" / "train.jsonl", lines)
    source = {"type": "huggingface", "dataset": str(tmp_path / "hfjson"), "split": "train",
              "streaming": True, "src_field": "english", "tgt_field": "german"}
    _, output = _download(tmp_path, source)
    assert _pairs(output) == list(zip(EN, DE))


# ----------------------------------------------------------------- HTTP, mirrors, archives


def _gz(lines):
    return gzip.compress("".join(line + "\n" for line in lines).encode())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ref(url, data, **extra):
    return FileRef.model_validate({"url": url, "sha256": _sha(data), **extra})


def _progress(**kwargs):
    from tqdm import tqdm

    return tqdm(disable=True, **kwargs)


def test_pinned_urls_download_and_verify(tmp_path):
    en, de = _gz(EN), _gz(DE)
    with LoopbackFileServer() as server:
        server.files.update({"/train.en.gz": en, "/train.de.gz": de})
        train = {"type": "files", "src": {"url": f"{server.url}/train.en.gz", "sha256": _sha(en)},
                 "tgt": {"url": f"{server.url}/train.de.gz", "sha256": _sha(de)}}
        _, output = _download(tmp_path, train)
    assert _pairs(output) == list(zip(EN, DE))
    # Downloads are cached by sha256: the three splits fetched each file once.
    assert [path for path, _ in server.requests].count("/train.en.gz") == 1


def test_checksum_mismatch_fails_and_keeps_nothing(tmp_path):
    with LoopbackFileServer() as server:
        server.files["/train.en.gz"] = _gz(EN)
        ref = _ref(f"{server.url}/train.en.gz", b"other content")
        with pytest.raises(InputDataError, match="checksum mismatch: expected sha256"):
            locate_file(ref, [], tmp_path / "downloads", _progress)
    assert not [p for p in (tmp_path / "downloads").rglob("*") if p.is_file()]


def test_a_server_that_trickles_bytes_is_cut_off_as_stalled_not_waited_on(tmp_path, monkeypatch):
    from stages.download import http

    monkeypatch.setattr(http, "STALL_WINDOW_S", 1.0)
    monkeypatch.setattr(http, "STALL_BYTES", 100)
    with LoopbackFileServer() as server:
        server.files["/train.en.gz"] = b"x" * 10_000
        server.trickle_s["/train.en.gz"] = 0.05  # 20 bytes a second, for ever enough
        ref = _ref(f"{server.url}/train.en.gz", server.files["/train.en.gz"])
        started = time.monotonic()
        with pytest.raises(InputDataError, match=r"unreachable after 2 attempts \(stalled: \d+ bytes in the last 1 s"):
            http.fetch_url(ref.url, tmp_path / "f", ref.sha256, _progress, retries=1, backoff_s=0.01)
        assert time.monotonic() - started < 10
    assert (tmp_path / "f.part").stat().st_size > 0  # what arrived is kept for the next attempt to resume


def test_unreachable_url_says_what_to_put_where(tmp_path, capsys):
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ref = _ref(f"http://127.0.0.1:{port}/train.en.gz", b"x")
    with pytest.raises(InputDataError) as error:
        from stages.download import http

        http.fetch_url(ref.url, tmp_path / "f", ref.sha256, _progress, retries=1, backoff_s=0.01)
    assert "unreachable after 2 attempts" in str(error.value)
    # Each failed attempt is said as it happens, not only after the last one.
    said = capsys.readouterr().err
    assert f"download {ref.url}: attempt 1 of 2 failed (" in said and "trying again in 0.01 s" in said
    with pytest.raises(InputDataError) as error:
        locate_file(ref, [str(tmp_path / "empty-mirror")], tmp_path / "downloads", _progress)
    message = str(error.value)
    assert "put 'train.en.gz' (sha256" in message and "NMT_MIRROR" in message and "empty-mirror" in message


def test_http_404_is_not_retried(tmp_path):
    with LoopbackFileServer() as server:
        with pytest.raises(InputDataError, match="HTTP 404"):
            locate_file(_ref(f"{server.url}/missing.gz", b"x"), [], tmp_path / "downloads", _progress)
    assert len(server.requests) == 1


def test_interrupted_download_resumes_with_a_range_request(tmp_path):
    data = _gz([f"sentence {i}" for i in range(20000)])
    with LoopbackFileServer() as server:
        server.files["/big.gz"] = data
        server.cut_after["/big.gz"] = len(data) // 3
        path = locate_file(_ref(f"{server.url}/big.gz", data), [], tmp_path / "downloads", _progress)
    assert path.read_bytes() == data
    assert server.requests[0] == ("/big.gz", None)
    assert server.requests[1] == ("/big.gz", f"bytes={len(data) // 3}-")


def test_mirror_is_used_before_the_network(tmp_path):
    data = _gz(EN)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "train.en.gz").write_bytes(data)
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "train.en.gz").write_bytes(b"stale copy")  # wrong digest: skipped
    with LoopbackFileServer() as server:
        ref = _ref(f"{server.url}/train.en.gz", data)
        path = locate_file(ref, [str(tmp_path / "wrong"), str(mirror)], tmp_path / "downloads", _progress)
    assert path == mirror / "train.en.gz" and server.requests == []


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_archive_member_is_extracted(tmp_path):
    archive = _tar({"corpus/train.en": b"Hello.\n", "corpus/train.de": b"Hallo.\n"})
    with LoopbackFileServer() as server:
        server.files["/corpus.tgz"] = archive
        ref = _ref(f"{server.url}/corpus.tgz", archive, member="corpus/train.de")
        path = locate_file(ref, [], tmp_path / "downloads", _progress)
    assert path.read_text() == "Hallo.\n"


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_archive_with_path_escaping_member_is_refused(tmp_path, kind):
    if kind == "tar":
        archive = _tar({"ok.txt": b"fine", "../../escape.txt": b"evil"})
    else:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as zipped:
            zipped.writestr("ok.txt", "fine")
            zipped.writestr("../../escape.txt", "evil")
        archive = buffer.getvalue()
    path = tmp_path / f"corpus.{kind}"
    path.write_bytes(archive)
    ref = FileRef.model_validate({"path": str(path), "member": "ok.txt"})
    with pytest.raises(InputDataError, match=r"refusing to extract member '\.\./\.\./escape\.txt'"):
        locate_file(ref, [], tmp_path / "downloads", _progress)
    assert not list(tmp_path.rglob("escape.txt"))
    assert not list((tmp_path / "downloads").rglob("ok.txt"))


# ----------------------------------------------------------------- sacreBLEU test sets


@pytest.fixture
def sacrebleu_set(tmp_path, monkeypatch):
    """A real sacreBLEU PlainTextDataset, registered under a test name, whose zip is
    served from loopback (sacreBLEU's own downloader fetches it) or found in a mirror."""
    from sacrebleu.dataset import DATASETS
    from sacrebleu.dataset.plain_text import PlainTextDataset

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("set/test.en", "".join(f"{line}\n" for line in EN))
        zipped.writestr("set/test.de", "".join(f"{line}\n" for line in DE))
    archive = buffer.getvalue()
    server = LoopbackFileServer()
    server.files["/testset.zip"] = archive
    with server:
        dataset = PlainTextDataset("nmt-test/set", data=[f"{server.url}/testset.zip"],
                                   md5=[hashlib.md5(archive).hexdigest()],
                                   langpairs={"en-de": ["set/test.en", "set/test.de"]})
        dataset._rawdir = str(tmp_path / "sacrebleu" / "raw")
        dataset._outdir = str(tmp_path / "sacrebleu")
        monkeypatch.setitem(DATASETS, "nmt-test/set", dataset)
        yield server, archive


def test_sacrebleu_test_set_by_name_is_downloaded_by_sacrebleu(tmp_path, sacrebleu_set):
    server, _ = sacrebleu_set
    _, output = _download(tmp_path, _files(write_lines(tmp_path / "a.en", EN), write_lines(tmp_path / "a.de", DE)),
                          test={"type": "sacrebleu", "test_set": "nmt-test/set"})
    assert _pairs(output, "test") == list(zip(EN, DE))
    assert [path for path, _ in server.requests] == ["/testset.zip"]


def test_sacrebleu_test_set_comes_from_a_mirror_when_offline(tmp_path, sacrebleu_set):
    server, archive = sacrebleu_set
    server.files.clear()  # the "network" has nothing
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "testset.zip").write_bytes(archive)
    train = _files(write_lines(tmp_path / "a.en", EN), write_lines(tmp_path / "a.de", DE))
    _, output = _download(tmp_path, train, test={"type": "sacrebleu", "test_set": "nmt-test/set"},
                          mirrors=[str(mirror)])
    assert _pairs(output, "test") == list(zip(EN, DE))
    assert server.requests == []


def test_unknown_sacrebleu_test_set_or_language_pair(tmp_path, sacrebleu_set):
    train = _files(write_lines(tmp_path / "a.en", EN), write_lines(tmp_path / "a.de", DE))
    with pytest.raises(InputDataError, match="'nmt-test/nope' is unknown to sacreBLEU"):
        _download(tmp_path, train, test={"type": "sacrebleu", "test_set": "nmt-test/nope"})
    with pytest.raises(InputDataError, match="has no language pair 'en-fr'"):
        _download(tmp_path, train, test={"type": "sacrebleu", "test_set": "nmt-test/set", "langpair": "en-fr"})
