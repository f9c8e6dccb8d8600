"""A large parallel corpus made from Multi30k, for measuring the data stages at scale.

Pair ``i`` joins two Multi30k training pairs on both sides: pair ``a = i mod n`` and
pair ``b = (a + 1 + i div n) mod n``, where ``n`` is Multi30k's 29,000 pairs. For a
fixed ``i div n`` the second index is a shift of the first, so the ``(a, b)`` index
pairs never repeat below ``n * (n - 1)``, about 841M: the text repeats only where
Multi30k itself repeats a sentence, and deduplication keeps almost everything. The
sentences are real captions with real translations, about 26 words a side, so
normalization, BPE and encoding cost what they cost on real text.

    python benchmarks/data/large_corpus.py 5000000 /tmp/corpus   # writes train.en, train.de
"""

from __future__ import annotations

import argparse
import os
import gzip
from pathlib import Path

DEFAULT_MULTI30K = Path(os.environ.get("NMT_CORPORA") or Path(__file__).resolve().parents[2] / "corpora") / "multi30k"


def read_gzip_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def write_corpus(pairs: int, out_dir: Path, multi30k: Path = DEFAULT_MULTI30K,
                 src_lang: str = "en", tgt_lang: str = "de") -> tuple[Path, Path]:
    """Write ``pairs`` lines to ``train.<src_lang>`` and ``train.<tgt_lang>`` (plain UTF-8)."""
    src = read_gzip_lines(multi30k / f"train.{src_lang}.gz")
    tgt = read_gzip_lines(multi30k / f"train.{tgt_lang}.gz")
    n = len(src)
    if pairs > n * (n - 1):
        raise ValueError(f"at most {n * (n - 1)} distinct pairs can be made from {n} sentences")
    out_dir.mkdir(parents=True, exist_ok=True)
    src_path, tgt_path = out_dir / f"train.{src_lang}", out_dir / f"train.{tgt_lang}"
    with open(src_path, "w", encoding="utf-8") as src_out, open(tgt_path, "w", encoding="utf-8") as tgt_out:
        for start in range(0, pairs, n):
            shift = 1 + start // n
            rows = range(min(n, pairs - start))
            src_out.write("".join(f"{src[a]} {src[(a + shift) % n]}\n" for a in rows))
            tgt_out.write("".join(f"{tgt[a]} {tgt[(a + shift) % n]}\n" for a in rows))
    return src_path, tgt_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", type=int)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--multi30k", type=Path, default=DEFAULT_MULTI30K)
    args = parser.parse_args()
    src, tgt = write_corpus(args.pairs, args.out_dir, args.multi30k)
    print(f"wrote {args.pairs:,} pairs: {src} ({src.stat().st_size / 2**20:.0f} MiB), "
          f"{tgt} ({tgt.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
