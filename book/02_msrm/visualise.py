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
# # MSRM 3 — top-6 retrieval lists (Figure 3), the learned incidence, and the claims
#
# Figure 3 of the paper shows top-6 lists of MSRM and PCME on MS-COCO with each result's ζ (how many concept
# labels it differs from the query's ground truth in). We draw the same on scenes with the seed-`SEED`
# zero-shot models of `train.py` (loaded from the run cache), then the soft incidence S of Eq. (8) that MSRM
# learned, on one batch of test pairs, and collect every claim of the chapter into `results/msrm/claims.md`.
#
# MSRM is a from-paper re-implementation (no public code); the open choices are in `train.py`.

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
N_QUERIES = 2  # queries per direction in Figure 3
BATCH = 10  # pairs in the incidence heatmap
N_SEEDS = 5  # train.py's seeds: Figure 3's claim is judged on every one (smoke uses 1)

# %%
import numpy as np

from xmr_core.book.results import (
    Claim,
    claims_frame,
    notebook_claims,
    write_claims,
    write_figure,
    write_judgements,
    write_table,
)
from xmr_core.chapters.msrm import (
    COMPARED,
    batch_incidence,
    chance_lists,
    draw_queries,
    incidence_figure,
    incidence_stats,
    list_summary,
    lists_figure,
    model_lists,
    seed_query_lists,
    split_scores,
    top6_summary,
    trained_models,
    visualise_judgements,
)
from xmr_core.chapters.pcme import table_views
from xmr_core.chapters.recorded import recorded_tuning
from xmr_core.chapters.summary import dataset_note
from xmr_core.claims import claim_rows
from xmr_core.config import RunConfig
from xmr_core.data.datasets import with_pixels
from xmr_core.experiment.protocols import chapter_setup

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR,
                            BACKBONE=BACKBONE, IMAGE_WEIGHTS=IMAGE_WEIGHTS, WORD_VECTORS=WORD_VECTORS, PROGRESS=PROGRESS)
print(run.describe())

# %%
corpus, trunk, data, enc = chapter_setup(run)
tuned = recorded_tuning("msrm/tuning", run, methods=list(COMPARED))  # train.py's choices, from its table
test = with_pixels(data.test)  # real data: the image files decoded for the figures (scenes: as is)
models, _ = trained_models(["MSRM", "PCME"], data, tuned, enc, run, SEED)  # train.py's zero-shot models (and whether they converged)
scores = split_scores(models, test, data.vocab, run.torch_device)  # each model's own (i2t, t2i) scores

# %% [markdown]
# ## Figure 3 — top-6 lists with each result's ζ
#
# Queries are spread over the test split. Frames use the book's one relevance code: green = an exact positive (the
# caption's logical form holds in the image), red = not; "GT" marks the instance ground truth, and ζ = concept-label
# differences from the query's image (0: a plausible match under PMRP's strictest ζ). The committed figure is from
# the last execution, when green meant the instance ground truth: the frames change when this notebook is next
# re-executed.

# %%
rng = np.random.default_rng(SEED)  # draws Figure 3's queries, then the incidence's batch
img_q, cap_q = draw_queries(rng, test, N_QUERIES)
lists = model_lists(scores, test, img_q, cap_q)
write_table(lists, "msrm/fig3_lists", run=run, caption=(
    f"Figure 3 analogue: top-6 results of MSRM and PCME (zero-shot models, seed {SEED}) for {N_QUERIES} image and "
    f"{N_QUERIES} caption queries of the {DATASET} test split; zeta = L1 distance of concept labels to the query's image."))
fig3 = lists_figure(lists, test)
write_figure(fig3, "msrm/fig3", run=run, caption=(
    "Figure 3 analogue: top-6 lists, MSRM (left six) against PCME (right six); green frame = exact positive (the "
    "caption's logical form holds in the image), red = not; GT = the instance ground truth; zeta = concept-label "
    "differences from the query's image."))
zeta_summary = list_summary(lists)
zeta_summary

# %% [markdown]
# ## The learned incidence S of one batch
#
# S_qc of Eq. (8) for `BATCH` test pairs (image queries × caption candidates, the v2t hypergraph): 1 on the
# matches, exp(−d²_m/α) elsewhere, with the model's learned α and covariances. A caption is labelled by its
# first words and its image; the diagonal holds the matches.

# %%
pick = np.sort(rng.choice(test.n_captions, BATCH, replace=False))
S, matched = batch_incidence(models["MSRM"], test, data.vocab, pick, run.torch_device)
alpha = float(models["MSRM"].temperatures()[2])  # Eq. (8)'s learned alpha (of tau, lambda, alpha)
fig_s = incidence_figure(S, test, pick, alpha)
write_figure(fig_s, "msrm/incidence", run=run, caption=(
    f"The learned soft incidence S of MSRM (seed {SEED}) on {BATCH} test pairs: rows = image queries "
    "(hyperedges), columns = caption candidates (vertices); 1 on matches."))
incidence_stats(S, matched)

# %% [markdown]
# ## The claims of the chapter
#
# The claims `train.py` and `ablate.py` judged, read from the tables they wrote, and Figure 3's. A few queries
# can illustrate Figure 3 but not test it, so its claim is judged on the top-6 list of every test query of MSRM
# and PCME at each of `train.py`'s seeds (loaded from the run cache): the share of instance ground truths and the
# mean ζ per query, i2t and t2i queries two strata, paired by seed and by query, so the interval covers training
# noise and test sampling. Beside them, what a random ranking's top 6 would hold (the gallery's share of ground
# truths and its mean ζ to the query's image): the chance the two models are measured against.

# %%
lists_all = seed_query_lists(["MSRM", "PCME"], run.seeds(N_SEEDS), data, tuned, enc, run)
write_table(top6_summary(lists_all, chance_lists(test)), "msrm/fig3_every_query", run=run, caption=(
    f"Figure 3 over every {DATASET} test query and seed {list(run.seeds(N_SEEDS))}: the mean share of instance "
    "ground truths (%) and the mean zeta of the top 6, MSRM and PCME against a random ranking (chance)."))
judged = visualise_judgements(lists_all, run, table_views(data, DATASET))
write_judgements(judged, "msrm", "visualise", run)
claims = notebook_claims(run, "msrm")
claims += [Claim(**row) for row in claim_rows(judged).to_dict("records")]
preamble = ("MSRM has no public code: this chapter is a from-paper re-implementation, its open choices listed in "
            "`xmr_core/methods/msrm.py`. " + f"Run: profile `{PROFILE}`, dataset `{DATASET}`"
            + dataset_note(DATASET, compare="orderings and signs carry across data sets, absolute numbers do not",
                           lead="synthetic scenes")
            + ". Every claim is judged by the book's verdict protocol (docs/claims.md): an interval for each effect, "
              "paired by seed or by query, margins declared with the claim, not tested on runs that did not "
              "converge, collapsed, or models this book does not build.")
write_claims(claims, "msrm", run=run, preamble=preamble)
claims_frame(claims)
