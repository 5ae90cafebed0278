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
# # DVSE 1 — DVSE and Fast Re-ranking beside the baselines (Tables I–IV)
#
# *Dynamic Visual Semantic Sub-Embeddings and Fast Re-Ranking*, Wei et al. (arXiv 2309.08154, IEEE TMM 2025).
#
# **A from-paper re-implementation.** DVSE has no public code. `xmr_core.methods.dvse` follows the paper's
# Sec. III equation by equation; what the paper leaves open is a choice of ours, stated once in that module's
# docstring: one mask bit per sub-embedding from a fixed random w² (Eq. 3); the mask also gates the residual
# inside v^k; Eq. (4) on L2-normalised residuals with |·|; σ_k per image and sub-embedding, the sample std of its
# cosines to the batch's other captions, detached (Eq. 6–8); the t2i hinge against the other images' k-th
# sub-embeddings; L_var and L_dc summed over the batch; the **test-time score** max_k cos(v^k, t) (the paper
# does not say how K image embeddings and one caption embedding give one score). Fast Re-ranking (FR, Eq.
# 13–15) normalises every score over its column (the other queries' scores of the same gallery item):
# `xmr_core.similarity.fast_rerank`.
#
# DVSE encodes each image as K sub-embeddings (multi-head attention over the local features, a residual global
# feature and LayerNorm) and each caption as one embedding; a dynamic mask and an orthogonality loss keep the
# sub-embeddings apart (Eq. 3–4), and a variance-aware weighting of the hardest-negative hinge (Eq. 5–11)
# pushes each to encode the semantics it matches best. FR re-ranks any finished score matrix.
#
# Tables: **Table 1** (MS-COCO: R@K and rSum, 1K and 5K), **Table 2** (Flickr30K: R@K and rSum), **Table 3**
# (CUB Captions: R-P and R@1 on unseen classes), **Table 4** (FR against the nearest-neighbour re-rankers RR and
# MR: time and rSum, measured in one run on the same score matrices). Models: VSE0, PVSE K = 1, 2, 4, PCME
# μ-only and PCME (the PCME chapter's models: same builders, recipe and tuning, so their runs are loaded from the
# cache, not retrained), DVSE (K = 6) and DVSE + FR, and DVSE on region features, each with `N_SEEDS` seeds.
#
# **Data.** With `DATASET = "scenes"` everything runs on the embedded synthetic benchmark, which is neither
# COCO, Flickr30K nor CUB: compare orderings, not values. One set of models (trained on the seen classes, the
# PCME chapter's protocol) serves every table: Table 1 on the whole test split ("1K" = five folds of 1,000 images,
# "all" = all 5,000 of it, the 5K protocol's analogue), Table 2 on the same five folds (each 1,000 images and 5,000
# captions, exactly Flickr30K's test size, and the mean over the five counts every test query: the library has no
# second, Flickr-sized scenes data set, so Table 2's numbers are Table 1's "1K" columns in Flickr30K's layout),
# Table 3 on the test images of the unseen classes.

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
N_SEEDS = 5  # seeds of every compared model (cpu / paper; smoke uses 1): 5, the rule for the central claims
# (`python -m xmr_core.bench claims --seeds`: at 3 seeds some of this notebook's claims were within noise where 5
# would resolve them at their observed effect)

# %%
import matplotlib.pyplot as plt

from xmr_core.bench.rerank import main as rerank_benchmark
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import write_figure, write_judgements, write_table
from xmr_core.ceiling import split_ceiling
from xmr_core.chapters.dvse import (
    CEILING_RSUM,
    COMPARED,
    FR_COCO,
    FR_CUB,
    ORDER,
    PAPER_ONLY,
    TABLE3_COLUMNS,
    TABLE4_K,
    data_summary,
    fr_figure,
    fr_models,
    pair_judgements,
    per_run_frame,
    record_models,
    rerank_bench_args,
    split_sizes,
    table1_frame,
    table2_frame,
    table4_frame,
    table4_runs,
    table4_times,
    train_bindings,
    train_judgements,
    train_models,
    training_runs,
    write_region_tables,
)
from xmr_core.chapters.pcme import weight_axes
from xmr_core.chapters.summary import (
    ceiling_note,
    dataset_note,
    paper_table,
    with_ceiling_share,
    write_ceiling_table,
)
from xmr_core.chapters.views import missing_views
from xmr_core.claims import claim_rows, judgements_frame
from xmr_core.config import RunConfig
from xmr_core.evaluate import coco1k_missing
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.recipes import pcme_train_config
from xmr_core.experiment.training import tune_methods
from xmr_core.runs.tuning import LR_STEP, SUMMARY_CAPTION, tuning_frame, tuning_summary

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR,
                            BACKBONE=BACKBONE, IMAGE_WEIGHTS=IMAGE_WEIGHTS, WORD_VECTORS=WORD_VECTORS, PROGRESS=PROGRESS)
seeds = run.seeds(N_SEEDS)
print(run.describe())
print(f"seeds = {seeds}")
print(f"training: {pcme_train_config(PROFILE, seed=SEED, device=DEVICE, progress=PROGRESS)}")
print(f"learning rate tuned: {pcme_train_config(PROFILE).lr:g} x {LR_STEP:g}^k; weights tuned: {weight_axes(COMPARED)}")
print(f"Fast Re-ranking: Tables 1, 2, 4 {FR_COCO}; Table 3 {FR_CUB}; RR / MR neighbours {TABLE4_K}")
training_runs(PROFILE, N_SEEDS)

# %% [markdown]
# ## Data and the pretrained trunk (the PCME chapter's)

# %%
corpus, trunk, data, enc = chapter_setup(run)
print(data_summary(trunk, data))
missing = missing_views({"class": data.test_unseen, "exact": data.test}, DATASET)  # views this data set lacks: NaN
print("missing views: " + ("; ".join(missing.values()) or "none"))
split_sizes(data)

# %% [markdown]
# ## Tuning: one protocol for every method
#
# The PCME chapter's protocol (`xmr_core.runs.tuning`, docs/training.md): the learning rate and the method's main
# weight, log-spaced around their defaults, searched until the choice is bracketed (both neighbours tried and
# lower) or at a hard bound, then the training length checked; judged by validation rSum on the seen classes.
# DVSE's main weight is the margin α of its hinge (Eq. 10; the paper's 0.2, step ×2, at most 2), as for VSE0
# and PVSE; β = 0.4 and η = 0.6 stay at
# the paper's values (Figures 8 and 9 sweep them in `ablate.py`). The other four methods' tuning runs are the
# PCME chapter's, loaded from the cache.

# %%
tuned = tune_methods(PROFILE, enc, data.word_vectors, data.train, data.val, data.vocab, seed=SEED, run=run,
                     compared=COMPARED, device=DEVICE, progress=PROGRESS)
tuning = tuning_frame(tuned)
write_table(tuning, "dvse/tuning", run=run, caption=(
    f"Tuning runs of every compared method on the seen-class validation split ({DATASET}, profile {PROFILE}): "
    "every run of the search (by round) and of the schedule check; 'chosen' = the setting and schedule every "
    "seed is trained with. DVSE's weight is the margin alpha of Eq. (10) (K = 6, beta 0.4, eta 0.6)."))
tuning

# %%
summary = tuning_summary(tuning)
write_table(summary, "dvse/tuning_summary", run=run, caption=f"{SUMMARY_CAPTION} ({DATASET}, profile {PROFILE})")
summary

# %% [markdown]
# ## Training and recording every model
#
# Runs are cached by their full configuration: the PCME chapter's runs are loaded here. Each trained model is scored
# once and its **run record** kept (`docs/records.md`; `runs/records/<profile>/`, smoke's under `book/_build/smoke/`):
# per test query its best rank and R-Precision hits, on the whole test split with its own score (every view) and
# with Fast Re-ranking at the COCO scales (a second scoring of the same scores: "FR", instance view, the 1K folds
# cut from the whole split's re-ranked matrix), the DVSE seeds also re-ranked by RR and MR (Table 4); and on the
# unseen classes (class view) without and with FR at the CUB scales. The PCME chapter's models keep one record
# each: this chapter's scorings are added to the one that chapter wrote. A run whose record is there is read
# back, not scored again: the tables and the claims below are computed from the records alone.
#
# **Region features.** The paper's Faster R-CNN rows use BUTD region features. The scenes benchmark has their
# analogue (`xmr_core.data.regions`: one box per object plus background boxes, R = 8, encoded by a frozen CNN
# pretrained on the pretraining set), and DVSE reads them through the same `fit` (`ImageEncoderConfig(kind=
# "regions")`). It is trained with every seed at the grid DVSE's tuned learning rate and margin (no tuning of
# its own, no region baselines): its rows show what the region input gives, and only the claim that FR improves
# any model rests on them.

# %%
trained = train_models(seeds, data, tuned, enc, run)
records = record_models(trained, data, tuned, run)
trained.fits

# %% [markdown]
# ## Table 1 — the COCO-style comparison, with the Bayes ceiling
#
# Instance relevance (the caption's own image), 1K (five folds of the test split) and all of it. The ceiling row
# is the best any scorer can reach on this split (exact relevance, `xmr_core.ceiling`); "% of ceiling" is each
# model's rSum over the ceiling's. Rows marked "paper only" are the paper's baselines of the same encoder block
# that this book does not build (the paper's VSE++ uses hardest negatives: our VSE0, the sum of hinges, is not it).

# %%
label = DATASET
ceiling = split_ceiling(data.test, "all")
per_run = with_ceiling_share(per_run_frame(records), ceiling, CEILING_RSUM)
table1 = table1_frame(per_run, label, ceiling)
write_table(table1, "dvse/table1", run=run, caption=(
    f"DVSE Table I analogue. Paper: MS-COCO, ResNet-152 + Bi-GRU block, 1K (five folds of 1,000 images) and 5K. "
    f"Ours: {DATASET}{dataset_note(DATASET, 'COCO')}, frozen pretrained grid features + GloVe/BiGRU, models trained "
    f"on the seen classes; '1K' = 5 folds of {data.test.n_images // 5} test images, 'all' = all "
    f"{data.test.n_images} (the 5K protocol's analogue); profile {PROFILE}; mean over seeds (std where > 1). Paper "
    "rows: Table I of Wei et al.; 'PVSE K=2' carries the paper's PVSE row (its numbers are PVSE's K = 2 model). "
    "'(paper only)': not built here. 'DVSE + FR': Fast Re-ranking is applied to the whole test split's score "
    "matrix and the re-ranked matrix is then cut into the 1K folds, so its 1K columns use neighbourhoods from the "
    "whole gallery, where the paper's 1K protocol re-ranks within each fold of 1,000 images (a stated deviation; "
    "its 'all' columns follow the protocol)." + (f" '1K' not tested: {coco1k_missing(data.test)}."
                                                 if coco1k_missing(data.test) else "") + ceiling_note(ceiling)))
table1

# %% [markdown]
# ### Region features (the paper's Faster R-CNN + Bi-GRU block)
#
# The region DVSE in the layouts of Tables I and II (written as `table1_regions` and `table2_regions`; Table 1's
# shown), beside the paper's BUTD rows.

# %%
write_region_tables(per_run, data, label, seeds, run)

# %% [markdown]
# ## Table 2 — the Flickr30K layout
#
# The five 1K folds of the test split (each 1,000 images, 5,000 captions: Flickr30K's test size; their mean counts
# every test query) in Table II's layout. These are Table 1's "1K" columns: the library has no Flickr-sized second
# data set, so no separate training happens here.

# %%
table2 = table2_frame(per_run, label, ceiling)
write_table(table2, "dvse/table2", run=run, caption=(
    f"DVSE Table II analogue. Paper: Flickr30K test split (1,000 images), ResNet-152 + Bi-GRU block. Ours: "
    f"{DATASET}{dataset_note(DATASET, 'Flickr30K')}, the mean over five folds of {data.test.n_images // 5} test "
    f"images and their captions (Flickr30K's test size: 1,000 images): the same numbers as Table 1's '1K' columns; "
    f"profile {PROFILE}; mean over seeds. The paper's PVSE row does not say its K, so it stands as '(paper only)'."))
table2

# %% [markdown]
# ## Table 3 — the CUB-style comparison (zero-shot, class relevance)
#
# Every caption of the same class is a positive; the test images of the classes held out of training. FR uses
# the paper's CUB scales here.

# %%
table3 = paper_table(per_run, ORDER, "table3", TABLE3_COLUMNS, label, PAPER_ONLY["table3"])
write_table(table3, "dvse/table3", run=run, caption=(
    f"DVSE Table III analogue. Paper: CUB Captions (50 unseen classes), class relevance. Ours: "
    f"{DATASET}{dataset_note(DATASET, 'CUB')}, {data.test_unseen.n_images} test images of unseen classes, profile "
    f"{PROFILE}; mean over seeds. FR at the paper's CUB scales (gamma (9, 8), lambda (8, 17)). Paper rows: Table III "
    "of Wei et al.; its VSE++ row has the numbers of PCME's VSE0 row."
    + (f" Not tested: {missing['class']}." if "class" in missing else "")))
table3

# %% [markdown]
# ## Table 4 — FR against RR and MR, in one run on the same scores
#
# Each DVSE seed's records hold its whole-split scores re-ranked by RR, MR and FR (rSum); the seconds are measured
# on this machine from the model: the test split embedded and scored once, then each re-ranker applied to those very
# matrices (both directions) and timed. "test s" = embedding and scoring the test split plus re-ranking. RR (MTFN-RR) and MR
# (GaLR's multivariate re-ranking) are the library's implementations of the two nearest-neighbour re-rankers the
# paper compares with (`xmr_core.similarity`). The paper's times are on a GPU machine with 1,000 × 5,000
# (Flickr30K) and 5,000 × 25,000 (COCO 5K) matrices; ours embed and score on `DEVICE` and re-rank on this
# machine's CPU.

# %%
t4_runs = table4_runs(records, table4_times(seeds, data, tuned, enc, run))
table4 = table4_frame(t4_runs, label)
write_table(table4, "dvse/table4", run=run, caption=(
    f"DVSE Table IV analogue: DVSE's test scores ({data.test.n_images} x {data.test.n_captions}, {DATASET}) without "
    f"re-ranking and re-ranked by RR, MR and FR, timed in one run (embedded and scored on {run.torch_device}, "
    "re-ranked on the CPU); mean over the DVSE seeds "
    f"{seeds}. Paper: Table IV of Wei et al. (Flickr30K and MS-COCO 5K, BUTD features)."))
table4

# %% [markdown]
# FR at COCO 5K size: `python -m xmr_core.bench rerank` times FR on a random 5,000 × 25,000 matrix in both
# directions, with its memory, and RR and MR on a share of the query rows, extrapolated to all rows (smoke: a
# 500 × 2,500 matrix).

# %%
rerank_benchmark(rerank_bench_args(PROFILE))

# %% [markdown]
# ## Fast Re-ranking on every model
#
# The paper: "since it operates directly on the similarity matrix, FR has the potential to enhance the accuracy
# of any image-text retrieval model". Every model of this chapter, its own test scores with and without FR
# (Table 1's scales), rSum on the whole test split.

# %%
models = fr_models(data)
fig = fr_figure(per_run, models, ceiling, DATASET)
write_figure(fig, "dvse/fr_any_model", run=run, caption=(
    f"rSum on the whole {DATASET} test split of every model without and with Fast Re-ranking (gamma (25, 25), "
    f"lambda (20, 20)), mean over seeds {seeds}."))
plt.show()

# %%
write_ceiling_table(per_run, ceiling, "dvse/ceiling", run, protocol="all", rsum_column="all rSum")
write_table(trained.fits, "dvse/training", run=run,
            caption="Training runs of this notebook (cached = loaded, not retrained).")
write_table(per_run, "dvse/per_seed", run=run, caption=(
    "Every trained model and seed, without and with FR ('+ FR'): Table 1-2 values on the whole test split, Table 3 "
    "values ('CUB ...') on its unseen classes; the claims are checked on these."))
write_table(t4_runs, "dvse/table4_per_seed", run=run, caption="Table 4 per DVSE seed (seconds on this machine).")

# %% [markdown]
# ## Claims checked here
#
# The claims are declared once (`TRAIN_CLAIMS` in `xmr_core.chapters.dvse`) and judged by the book's one verdict
# protocol (`xmr_core.claims.judge`, `docs/claims.md`): the effect with a 95% bootstrap interval over the seeds,
# paired by seed where the compared runs share them (a model with and without FR, or re-ranked by RR / MR, is the
# same trained model, so those claims are paired), negligible or inconclusive when it spans zero (or the margin);
# "similar" and "slightly behind" use margins declared with the claim from the paper's tables, never the run's
# noise. A claim on a model that did not converge or collapsed (`claims.detect_collapse` of its test scores), or
# that this book does not build (DiVE, P2RM, the BERT block), is "not tested", saying why. rSum (whole test split)
# and the CUB-style R-P and R@1 are judged on each query's values, so their intervals cover test sampling as well
# as training noise, and every model is paired with every other by query (they score the same queries); the
# per-direction CUB claim and FR's speed use each seed's score only (training noise). Each claim judged on
# per-query values is written bound to the records that judge it (`claim_records_train.json`): `xmr claims
# recompute dvse` judges it again from the records alone.

# %%
bindings = train_bindings(records, run, missing)
judged = train_judgements(records, bindings, per_run, t4_runs, run, missing)
write_judgements(judged, "dvse", "train", run)
write_bindings(list(bindings.values()), run)
write_table(pair_judgements(judged, "fr-improves-any-model"), "dvse/fr_any_model", run=run, caption=(
    "FR on every model: the claim 'FR can improve any model' judged per model (its whole-split rSum with FR against "
    "without, paired by seed and by query)."))
claims = claim_rows(judged)
write_table(claims, "dvse/claims_train", run=run,
            caption="Claims checked by train.py (collected into claims.md by visualise.py).")
judgements_frame(judged)
