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
# # Leaderboard — every model of the book on one test split, against the Bayes ceiling
#
# Each chapter compares its paper's method with the baselines that paper chose, on that paper's metrics. Here
# every trained model of the book meets every metric on the **same** scenes test split: instance retrieval
# (R@K, rSum), the exact view (the captions whose logical form holds in the image), plausible matches (PMRP over
# ζ) and class relevance (R-Precision), each also after **Fast Re-ranking** (DVSE's FR, its temperatures tuned
# per model on the validation split). The Bayes ceiling, the best any scorer can reach on this split, is the top
# row, and every model gets its share of it.
#
# The models are the chapters' own runs at each chapter's tuned setting with `N_SEEDS` seeds, loaded from the run
# cache (run the chapters first, or this notebook trains them), each under its chapter's protocol (the `protocol`
# column): the PCME, MSRM and DVSE models on the frozen trunk's grid features, trained on the seen classes
# (zero-shot), and the DVSE chapter's DVSE on region features (zero-shot); the HREM chapter's models on region
# features, trained on every class (COCO-style). All are scored on the same test split; a claim compares models of
# one protocol only. Then the claims that should hold across methods, not only in the paper that made them, are
# judged over seeds and test queries.
#
# Not on the board: HMRN's models (another scenes variant and another task: a set of queries asked over rounds;
# compared in their own chapter), the HREM ensemble (two models averaged), HREM's SCAN t2i (trained untuned, only to
# time a score-based matcher) and the ablation variants (`xmr_core.chapters.leaderboard`'s docstring says why).
#
# **Data.** Scenes is a synthetic benchmark, neither COCO nor CUB: the values are not the papers', the
# orderings and the distance to the ceiling are what this page is for.

# %% tags=["parameters"]
PROFILE = "cpu"
DATASET = "scenes"
DATA_ROOT = ""
DATA_SEED = 0  # generates the benchmark (scenes, its class split); SEED below only seeds training
SEED = 0
DEVICE = "auto"
RESULTS_DIR = ""  # empty: the own folder of the profile and data set (`results.results_folder`)
BACKBONE = ""  # image trunk of the paper profile: empty = as the paper (ResNet-152 COCO / F30K, ResNet-50 CUB)
IMAGE_WEIGHTS = ""  # its ImageNet weights: empty = the torchvision file in the torch cache; a path; "none"
WORD_VECTORS = ""  # the GloVe 300-d file of the papers; empty = the packaged GloVe 6B 50-d (named substitute)
PROGRESS = True
N_SEEDS = 3  # seeds of every model (cpu / paper); smoke uses 1

# %%
import matplotlib.pyplot as plt
import pandas as pd

from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import write_figure, write_judgements, write_table, write_text
from xmr_core.chapters.leaderboard import (
    BOOK_MODELS,
    FR_GRID,
    board_bindings,
    board_evidence,
    book_setup,
    cross_method_judgements,
    heatmap_figure,
    model_summary,
    recorded_book,
    score_book,
)
from xmr_core.chapters.summary import ceiling_frame, dataset_note, write_optional_table
from xmr_core.chapters.views import ceiling_rsum, missing_views, no_ceiling
from xmr_core.claims import judgements_frame, render_claims
from xmr_core.config import RunConfig
from xmr_core.runs.tuning import SUMMARY_CAPTION, tuning_frame, tuning_summary

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR,
                            BACKBONE=BACKBONE, IMAGE_WEIGHTS=IMAGE_WEIGHTS, WORD_VECTORS=WORD_VECTORS, PROGRESS=PROGRESS)
seeds = run.seeds(N_SEEDS)
print(run.describe())
print(f"seeds = {seeds}; Fast Re-ranking temperatures tried on validation: {FR_GRID}")
pd.DataFrame(BOOK_MODELS, columns=["chapter", "method", "K"])

# %% [markdown]
# ## Data (both protocols), the pretrained trunk and each method's tuned setting
#
# Each method's setting is the one its own chapter's `train.py` chose by the book's tuning protocol, read from
# that chapter's tuning table (`results/<chapter>/tuning.csv`); nothing is tuned again here.

# %%
book = book_setup(run)
test = book.grid.test  # the same test split as book.regions.test (checked)
tuned = recorded_book(run)
missing = missing_views({"exact": test, "class": test, "plausible": test}, DATASET)  # columns left empty
print("missing views: " + ("; ".join(missing.values()) or "none"))
tuning = tuning_frame(tuned)
write_table(tuning, "leaderboard/tuning", run=run,
            caption=("Each method's tuning runs on the validation split, as its chapter's train.py recorded them "
                     "(results/<chapter>/tuning.csv): every run of the search (by round) and of the schedule check; "
                     "'chosen' = the setting and schedule every seed is trained with. FR temperatures are tuned per "
                     "model in per_seed."))
print(f"test split: {test.n_images} images, {test.n_captions} captions, views {test.views()}")
summary = tuning_summary(tuning)
write_table(summary, "leaderboard/tuning_summary", run=run, caption=f"{SUMMARY_CAPTION} (profile {PROFILE})")
summary

# %% [markdown]
# ## Every model and seed, with and without Fast Re-ranking
#
# Each run's record on the whole test split (`docs/records.md`): the chapter's own record of the run, to which the
# leaderboard adds its Fast Re-ranking scoring (temperatures tuned on the validation split, kept in the record). The
# rows are the means over queries of the record's two scorings; a run whose record holds both is not scored again.

# %%
book_runs = score_book(seeds, book, tuned, run)  # the rows, and the records the claims are judged on
per_run = book_runs.per_run
ceiling = ceiling_rsum(test)  # None without exact relevance (real data): no ceiling table
ceiling_table = None if ceiling is None else ceiling_frame(per_run, "rSum", ceiling)
write_optional_table(ceiling_table, "leaderboard/ceiling", run=run, caption=(
    f"Each model's instance rSum on the whole {DATASET} test split as a share of the Bayes ceiling, per seed, "
    f"with and without Fast Re-ranking (profile {PROFILE})."))
write_table(per_run, "leaderboard/per_seed", run=run, caption=(
    f"Every model and seed of the book on the whole {DATASET} test split, with and without Fast Re-ranking "
    "(FR gamma / lambda: the tied temperatures chosen on the validation split); profile " + PROFILE + "."))

# %% [markdown]
# ## The leaderboard
#
# Mean over seeds (`seeds` = how many); `+ FR` rows are the same models re-ranked. Only the instance view has a
# computed ceiling; `% of ceiling` is the model's instance rSum over the ceiling's.

# %%
board = model_summary(per_run, test)
write_table(board, "leaderboard/leaderboard", run=run, caption=(
    f"Every trained model of the book on one {DATASET} test split ({test.n_images} images, "
    f"{test.n_captions} captions){dataset_note(DATASET, 'COCO or CUB', lead='synthetic')}, profile "
    f"{PROFILE}; mean over seeds. Instance R@K and rSum, exact-view and class R-Precision, plausible PMRP; '+ FR' = "
    "Fast Re-ranking with validation-tuned temperatures."
    + (" Top row: the Bayes ceiling (xmr_core.ceiling)." if ceiling is not None else
       f" {no_ceiling(DATASET)}; columns of views it lacks are empty ({'; '.join(missing.values())}).")))
board

# %% [markdown]
# ## Models × metrics
#
# Each column is coloured from its lowest (dark) to its highest (bright) model, so a column's colours compare
# models; the numbers are the metric values, and each instance column's label carries the Bayes ceiling, how
# far the best model still is from perfect.

# %%
fig = heatmap_figure(board, DATASET)
write_figure(fig, "leaderboard/heatmap", run=run, caption=(
    "Models x metrics of the leaderboard table; each column coloured from its lowest to its highest model; the "
    "instance columns name the Bayes ceiling."))
plt.show()

# %% [markdown]
# ## Claims that should hold across methods
#
# Declared once (`CLAIMS` in `xmr_core.chapters.leaderboard`) and judged by the book's verdict protocol
# (`xmr_core.claims.judge`, `docs/claims.md`): a 95% bootstrap interval of each effect over the seeds and the test
# queries (each query's rSum, or its PMRP, from the runs' records; images and captions as two strata). Every model of a protocol
# trains on the same seeds and scores the same test queries, so the sides are paired by seed and by query; a model
# and its `+ FR` row are one trained model. "Every probabilistic model beats the best deterministic one" is one peak
# claim per probabilistic model, the best deterministic model chosen inside each resample; "improves any model" is
# universal: one model it does not improve refutes it. Not tested when a compared run did not converge or
# collapsed (`collapse` in the per-seed table). Each claim is bound to the records it reads
# (`results/leaderboard/claim_records_board.json`): `xmr claims recompute leaderboard` judges it again from them.

# %%
judged = cross_method_judgements(board_evidence(book_runs.records), run, missing)
write_judgements(judged, "leaderboard", "board", run)
write_bindings(list(board_bindings(book_runs.records, run, missing).values()), run)
write_text(render_claims(judged, "leaderboard", profile=PROFILE, dataset=DATASET, preamble=(
    f"Claims across the book's methods, on one {DATASET} test split (profile `{PROFILE}`, seeds {seeds}). "
    + ("Synthetic scenes: orderings and signs carry across data sets, absolute numbers do not." if DATASET == "scenes"
       else ""))),
    "leaderboard/claims.md", run=run)
judgements_frame(judged)
