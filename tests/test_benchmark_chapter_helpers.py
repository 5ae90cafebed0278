"""The benchmark chapter's helpers (xmr_core.chapters.benchmark): its tables, example queries and figures on
small hand-made splits, each against values worked out by hand here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from fixtures.corpora import synthetic_corpus, synthetic_split

from xmr_core.chapters import benchmark as chapter
from xmr_core.data import scene_grammar as grammar
from xmr_core.data.export import FORMATS
from xmr_core.data.text import Vocabulary


def _split(n: int, k: int = 5, seed: int = 0, **fields: object):
    """A synthetic split of `n` images with `k` captions each (`fixtures.corpora`), `fields` replaced."""
    return dataclasses.replace(synthetic_split("test", n, np.random.default_rng(seed), k=k), **fields)


def test_directory_mib(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"\0" * 2**20)
    (tmp_path / "y.bin").write_bytes(b"\0" * 2**19)
    assert chapter.directory_mib(tmp_path) == 1.5


def test_split_table():
    corpus = synthetic_corpus(sizes={"train": 4, "test": 2})
    layout = {"train": [1, 2, 3, 4], "test": [2, 4]}
    corpus.splits = {name: dataclasses.replace(s, meta={"layout": SimpleNamespace(n_objects=np.array(layout[name]))})
                     for name, s in corpus.splits.items()}
    corpus.splits["test"] = dataclasses.replace(corpus.splits["test"], exact=None)
    # the fixture: 5 captions an image, images 8 x 10, 3 regions of 4 dims
    assert chapter.split_table(corpus).values.tolist() == [["train", 4, 20, 2.5, "8²", "3 × 4", True],
                                                           ["test", 2, 10, 3.0, "8²", "3 × 4", False]]


def test_language_table():
    train = _split(2, k=1, captions=["a red circle", "a blue square"])
    test = _split(3, k=1, captions=["a red circle", "a red circle", "two shapes"])
    vocab = Vocabulary.build(train.captions)  # <pad>, <unk>, a, blue, circle, red, square
    values = dict(chapter.language_table(train, test, vocab, 0.5).values.tolist())
    grammar_words = len(grammar.vocabulary())
    assert values["grammar words"] == grammar_words
    assert values["vocabulary (train captions, incl. <pad>, <unk>, punctuation)"] == 7
    assert values["GloVe coverage of the vocabulary %"] == 50.0
    # every grammar word but a, blue, circle, red and square (all grammar words) is missing
    assert values["grammar words missing from the train vocabulary"] == grammar_words - 5
    assert values["caption length, tokens: mean"] == 3.0 and values["caption length, tokens: max"] == 3
    assert values["distinct test caption strings %"] == pytest.approx(200 / 3)
    assert values["test captions also in train, word for word %"] == pytest.approx(200 / 3)


def test_level_mix():
    train = _split(4, k=1, caption_level=["full", "vague", "vague", "partial"])
    test = _split(1, k=1, caption_level=["vague"])
    mix = chapter.level_mix(train, test)
    assert mix.columns.tolist() == ["level", "train captions", "train %", "test captions"]
    assert mix["level"].tolist() == list(grammar.LEVELS)  # full, partial, relational, vague
    pd.testing.assert_series_equal(mix["train captions"], pd.Series([1, 1, np.nan, 2], name="train captions"))
    pd.testing.assert_series_equal(mix["train %"], pd.Series([25.0, 25.0, np.nan, 50.0], name="train %"))
    pd.testing.assert_series_equal(mix["test captions"], pd.Series([np.nan, np.nan, np.nan, 1], name="test captions"))


def test_example_queries():
    split = _split(12, k=4, caption_level=list(grammar.LEVELS) * 12)  # every image: one caption per level
    queries, images, flags = chapter.example_queries(split, 5, np.random.default_rng(0))
    assert images.shape == (4, 5, 8, 10, 3) and flags.shape == (4, 5)
    for q, (level, text) in enumerate(zip(grammar.LEVELS, queries)):
        c = next(i for i, caption in enumerate(split.captions) if text.endswith(f"] {caption}"))
        assert split.caption_level[c] == level
        assert text == f"[{level}; exact positives: {split.exact[c].sum()}] {split.captions[c]}"
        shown = [next(i for i in range(split.n_images) if (split.images[i] == img).all()) for img in images[q]]
        assert shown[0] == split.caption_image[c] and len(set(shown)) == 5  # its own image first, no repeats
        np.testing.assert_array_equal(flags[q], split.exact[c, shown])
        n_pos = min(5, int(split.exact[c].sum()))
        assert flags[q].tolist() == [True] * n_pos + [False] * (5 - n_pos)  # positives, then negatives


def test_held_out_accuracy_and_pretrain_table():
    assert chapter.held_out_accuracy({"shape_accuracy": 90.0, "config": {}, "size_accuracy": 80.0}) == {
        "shape_accuracy": 90.0, "size_accuracy": 80.0}
    meta = {"accuracy_every_cell": {"shape": 1.0, "colour": 2.0, "size": 3.0, "empty": 9.0},
            "accuracy_objects": {"shape": 4.0, "colour": 5.0, "size": 6.0, "empty": 7.0}}
    table = chapter.pretrain_table(meta)
    assert table.columns.tolist() == ["cells", "shape", "colour", "size", "empty vs object"]
    assert table.iloc[0, :4].tolist() == ["every cell", 1.0, 2.0, 3.0] and np.isnan(table.iloc[0, 4])
    assert table.iloc[1].tolist() == ["cells with an object", 4.0, 5.0, 6.0, 7.0]


def test_corpus_images():
    assert chapter.corpus_images(synthetic_corpus(sizes={"train": 6, "val": 3, "test": 4})) == 13


def test_format_round_trips_send_the_multi_variant_to_drilldown(monkeypatch: pytest.MonkeyPatch):
    single, multi = synthetic_corpus(0), synthetic_corpus(1)
    calls = []

    def round_trip(fmt: str, corpus: object, variant: str, profile: str, seed: int) -> dict[str, str]:
        calls.append((fmt, corpus, variant, profile, seed))
        return {"format": fmt, "variant": variant}

    monkeypatch.setattr(chapter, "format_round_trip", round_trip)
    table = chapter.format_round_trips(single, multi, "smoke", 7)
    assert table["format"].tolist() == list(FORMATS)
    assert [(f, c is multi, v) for f, c, v, _, _ in calls] == [
        (f, f == "drilldown", "multi" if f == "drilldown" else "single") for f in FORMATS]
    assert {(p, s) for *_, p, s in calls} == {("smoke", 7)}


def test_figures():
    split = _split(4)
    fig = chapter.caption_gallery_figure(split, 2)
    assert len(fig.axes) == 4
    text = fig.axes[1].texts[0].get_text()
    assert text.startswith(f"[full] {split.captions[0]}") and split.captions[4] in text
    plt.close(fig)
    fig = chapter.positives_figure(split)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == list(grammar.LEVELS)
    plt.close(fig)
    objects = SimpleNamespace(meta={"region_object": np.array([[0, -1, 1]] * 4)})
    boxed = dataclasses.replace(split, meta=objects.meta)
    fig = chapter.region_boxes_figure(boxed, 2)
    assert [len(ax.patches) for ax in fig.axes] == [3, 3]  # one rectangle per region box
    assert [p.get_linestyle() for p in fig.axes[0].patches] == ["-", ":", "-"]  # the background box dotted
    plt.close(fig)
    fig = chapter.query_gallery_figure(split, 3)
    assert fig.axes[2].get_title(loc="left") == "1. object 0 of image 2\n2. object 1 of image 2\n3. object 2 of image 2"
    plt.close(fig)
