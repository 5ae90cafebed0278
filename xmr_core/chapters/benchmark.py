"""The benchmark chapter (`book/00_benchmark/benchmark.py`): the tables and figures that show what the scenes
benchmark is: its splits, captions and language, its exact relevance, its region features, its multi-object
variant, and its round trip through the real data formats.

Every function reads a generated corpus (`data.scenes.load_scenes`) or one of its splits; the figures are returned,
never saved (the notebook writes them through `book.results.write_figure`).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from xmr_core.data import scene_grammar as grammar
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.export import FORMATS, content_diff
from xmr_core.data.load import load_corpus
from xmr_core.data.text import Vocabulary, tokenize

CAPTIONS_PER_IMAGE = 5

# What each real format holds (`data.export.FORMATS`), for the formats table.
FORMAT_DESCRIPTIONS: dict[str, str] = {
    "precomp": "SCAN / VSE precomp: {split}_ims.npy (N×R×D regions), {split}_caps.txt (5 per image), ids",
    "karpathy": "raw images + Karpathy dataset json (+ COCO-style instances json for plausible labels)",
    "cub": "CUB-200 layout: images/<class>/<img>, text_c10/<class>/<img>.txt, class split files",
    "drilldown": "Drill-down Visual Genome layout: split txt, region graphs (queries), region features",
}
MULTI_FORMATS = ("drilldown",)  # the multi-query formats: the multi variant is exported there (HMRN's chapter)


def directory_mib(root: Path) -> float:
    """The size of every file under `root`, in MiB."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def split_table(corpus: Corpus) -> pd.DataFrame:
    """One row per split: images, captions, mean objects an image, image size, region slots × dims, and whether
    exact relevance is stored."""
    return pd.DataFrame([
        {"split": name, "images": s.n_images, "captions": s.n_captions,
         "objects / image": s.meta["layout"].n_objects.mean(), "image size": f"{s.images.shape[1]}²",
         "regions": f"{s.regions.shape[1]} × {s.regions.shape[2]}", "exact stored": s.exact is not None}
        for name, s in corpus.splits.items()
    ])


def caption_gallery_figure(split: Split, n: int) -> Figure:
    """The split's first `n` images, each beside its five captions with their level in brackets."""
    fig, axes = plt.subplots(n, 2, figsize=(11, 1.25 * n), width_ratios=(1, 7), squeeze=False)
    for i, (img_ax, text_ax) in enumerate(axes):
        img_ax.imshow(split.images[i])
        img_ax.axis("off")
        text_ax.axis("off")
        own = slice(CAPTIONS_PER_IMAGE * i, CAPTIONS_PER_IMAGE * (i + 1))
        lines = [textwrap.fill(f"[{lv}] {c}", width=125, subsequent_indent="      ")
                 for c, lv in zip(split.captions[own], split.caption_level[own])]
        text_ax.text(0.0, 0.5, "\n".join(lines), fontsize=7.5, va="center", transform=text_ax.transAxes)
    fig.tight_layout()
    return fig


def language_table(train: Split, test: Split, vocab: Vocabulary, coverage: float) -> pd.DataFrame:
    """The captions' language: grammar words, the training vocabulary and its word-vector `coverage` (a share),
    grammar words missing from it, training caption lengths (tokens), and how many test captions are distinct
    or also occur, word for word, in training."""
    lengths = np.array([len(tokenize(c)) for c in train.captions])
    train_set = set(train.captions)
    return pd.DataFrame([
        {"quantity": "grammar words", "value": len(grammar.vocabulary())},
        {"quantity": "vocabulary (train captions, incl. <pad>, <unk>, punctuation)", "value": len(vocab)},
        {"quantity": "GloVe coverage of the vocabulary %", "value": 100 * coverage},
        {"quantity": "grammar words missing from the train vocabulary",
         "value": len(set(grammar.vocabulary()) - set(vocab.words))},
        {"quantity": "caption length, tokens: mean", "value": lengths.mean()},
        {"quantity": "caption length, tokens: max", "value": lengths.max()},
        {"quantity": "distinct test caption strings %", "value": 100 * len(set(test.captions)) / test.n_captions},
        {"quantity": "test captions also in train, word for word %",
         "value": 100 * np.mean([c in train_set for c in test.captions])},
    ])


def positives_figure(split: Split) -> Figure:
    """Exact positives per caption by caption level (log-spaced bins, step histograms) and per image (how many
    of the split's captions hold in it)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    levels = np.asarray(split.caption_level)
    per_caption = split.exact.sum(1)
    bins = np.unique(np.round(np.geomspace(1, split.n_images, 30)))
    for lv in grammar.LEVELS:
        axes[0].hist(per_caption[levels == lv], bins=bins, histtype="step", linewidth=1.5, label=lv)
    axes[0].set_xscale("log")
    axes[0].set_xlabel(f"exact positives per caption (of {split.n_images} test images)")
    axes[0].set_ylabel("captions")
    axes[0].legend(fontsize=8)
    axes[1].hist(split.exact.sum(0), bins=30, color="tab:gray")
    axes[1].set_xlabel(f"captions (of {split.n_captions}) that hold in an image")
    axes[1].set_ylabel("images")
    fig.tight_layout()
    return fig


def level_mix(train: Split, test: Split) -> pd.DataFrame:
    """Captions per level (`scene_grammar.LEVELS` order) in the training split, their share (%), and in the test
    split."""
    counts = pd.Series(train.caption_level).value_counts().reindex(grammar.LEVELS)
    mix = counts.rename("train captions").to_frame()
    mix["train %"] = 100 * counts / counts.sum()
    mix["test captions"] = pd.Series(test.caption_level).value_counts().reindex(grammar.LEVELS)
    return mix.reset_index(names="level")


def example_queries(split: Split, n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One caption per level (drawn from `rng`) with `n` images: its own image, then other exact positives (drawn),
    then, when it has fewer than n positives, negatives (drawn). Returns the query texts (level and number of
    positives in brackets), the images (Q, n, H, W, 3) and their exact relevance (Q, n): `viz.retrieval_gallery`'s
    input."""
    levels = np.asarray(split.caption_level)
    queries, rows, flags = [], [], []
    for lv in grammar.LEVELS:
        c = int(rng.choice(np.flatnonzero(levels == lv)))
        own = int(split.caption_image[c])
        positives = [i for i in np.flatnonzero(split.exact[c]) if i != own]
        negatives = np.flatnonzero(~split.exact[c])
        picked = [own, *rng.permutation(positives)[: n - 1].tolist()]
        picked += rng.choice(negatives, n - len(picked), replace=False).tolist()
        queries.append(f"[{lv}; exact positives: {split.exact[c].sum()}] {split.captions[c]}")
        rows.append(split.images[picked])
        flags.append(split.exact[c, picked])
    return queries, np.stack(rows), np.stack(flags)


def held_out_accuracy(regions_meta: Mapping[str, object]) -> dict[str, object]:
    """The region encoder's held-out accuracies (the `*_accuracy` entries of `corpus.meta["regions"]`)."""
    return {k: v for k, v in regions_meta.items() if k.endswith("_accuracy")}


def region_boxes_figure(split: Split, n: int) -> Figure:
    """The split's first `n` images with their region boxes: objects' boxes white, background boxes black and
    dotted."""
    fig, axes = plt.subplots(1, n, figsize=(10, 2.7))
    for i, ax in enumerate(axes):
        ax.imshow(split.images[i])
        for (x0, y0, x1, y1), obj in zip(split.region_boxes[i], split.meta["region_object"][i]):
            ax.add_patch(plt.Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False,
                                       ec="white" if obj >= 0 else "black", lw=1, ls="-" if obj >= 0 else ":"))
        ax.axis("off")
    fig.suptitle("region boxes: objects (white), background (black, dotted)", fontsize=9)
    return fig


def pretrain_table(meta: Mapping[str, object]) -> pd.DataFrame:
    """The pretrained trunk's held-out accuracy (`PretrainedTrunk.meta`) on shape, colour and size, over every
    grid cell and over the cells holding an object (there also: empty vs object)."""
    attributes = ("shape", "colour", "size")
    every, objects = meta["accuracy_every_cell"], meta["accuracy_objects"]
    return pd.DataFrame([
        {"cells": "every cell", **{a: every[a] for a in attributes}},
        {"cells": "cells with an object", **{a: objects[a] for a in attributes}, "empty vs object": objects["empty"]},
    ])


def corpus_images(corpus: Corpus) -> int:
    """The number of images over every split of a corpus."""
    return sum(s.n_images for s in corpus.splits.values())


def query_gallery_figure(split: Split, n: int) -> Figure:
    """The split's first `n` images, each titled with its region queries in stored order (the multi variant)."""
    fig, axes = plt.subplots(1, n, figsize=(12, 3.6))
    for i, ax in enumerate(axes):
        ax.imshow(split.images[i])
        ax.axis("off")
        ax.set_title("\n".join(f"{k + 1}. {q}" for k, q in enumerate(split.queries[i])), fontsize=6, loc="left")
    fig.tight_layout()
    return fig


def format_round_trip(fmt: str, generated: Corpus, variant: str, profile: str, seed: int) -> dict[str, object]:
    """Export the scenes benchmark (`variant`) in format `fmt` (cached) and read it back through the real-data
    reader (`load_corpus`): the files written, their size, the top-level entries, whether every split read back
    equals the `generated` one (`export.content_diff`), and the seconds it took."""
    t0 = time.perf_counter()
    back = load_corpus("scenes", profile=profile, format=fmt, variant=variant, seed=seed, progress=False)
    out = Path(back.meta["export_dir"])
    files = [p for p in out.rglob("*") if p.is_file()]
    return {
        "format": fmt, "variant": variant, "what": FORMAT_DESCRIPTIONS.get(fmt, ""), "files": len(files),
        "MiB": sum(p.stat().st_size for p in files) / 2**20,
        "top-level entries": ", ".join(sorted(p.name for p in out.iterdir())),
        "same content after round trip": all(not content_diff(generated[n], back[n]) for n in back.splits),
        "seconds": time.perf_counter() - t0,
    }


def format_round_trips(single: Corpus, multi: Corpus, profile: str, seed: int) -> pd.DataFrame:
    """`format_round_trip` of every real format (`export.FORMATS`): the multi variant in the multi-query formats
    (`MULTI_FORMATS`, Drill-down's Visual Genome layout, as in HMRN's chapter), the single variant elsewhere."""
    return pd.DataFrame([
        format_round_trip(fmt, multi, "multi", profile, seed) if fmt in MULTI_FORMATS
        else format_round_trip(fmt, single, "single", profile, seed)
        for fmt in FORMATS
    ])
