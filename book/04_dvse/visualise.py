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
# # DVSE 3 — what the sub-embeddings do (Figures 6, 10–12) and the claims
#
# - **Figure 6**: the correlation among an image's K sub-embeddings v̂^k = s(w¹ att^k(z_v) z_v) (Sec. III-B),
#   for the Table V combinations the paper draws: SE only (4), DM without L_ort (6), L_ort without DM (2) and the
#   full DVSE (1); one test image as in the paper, the mean over the test split, and the mean |correlation| of
#   every seed.
# - **Figure 10**: where each sub-embedding attends, as heat maps over the image: each pixel sums the attention
#   weights att^k of the local features covering it (the trunk's grid cells, or the region boxes of the region
#   DVSE), and each map is titled with the image's own caption that sub-embedding matches best. The paper ranks
#   regions by the similarity of v̂^k to each region vector and scores them ρ(R − r)²; on our input the local
#   features and the sub-embeddings live in different spaces, so we show the attention weights that make v̂^k.
#   Scenes knows every object's box and which objects each caption names, so the figure's claim is measured over
#   every test image and seed: the share of each sub-embedding's attention on the objects its best-matching
#   caption names, against the share uniform attention would put there; the maps illustrate that number.
# - **Figures 11–12**: top-4 images of caption queries and top-5 captions of image queries, DVSE against PVSE
#   (K = 2, the paper's PVSE), without FR as in the paper. Scenes knows which captions hold in which image
#   (exact relevance): green = the caption holds, red = it does not, "(True)" = the dataset's ground truth.
#
# Nothing is trained here: every model is `train.py`'s or `ablate.py`'s (at the settings `train.py` recorded in
# `results/dvse/tuning.csv`), loaded from the run cache. The claims
# of the three notebooks are collected into `results/dvse/claims.md`.

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
N_SEEDS = 3  # ablate.py's seeds (train.py's first three): the runs of both are reused
N_QUERIES = 3  # queries per direction in Figures 11 and 12
N_HEAT = 4  # images in Figure 10

# %%
import matplotlib.pyplot as plt
import numpy as np

from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import (
    Claim,
    claims_frame,
    notebook_claims,
    write_claims,
    write_figure,
    write_judgements,
    write_table,
)
from xmr_core.chapters.dvse import (
    ABLATION_GRIDS,
    COMPARED,
    attention_variants,
    caption_query_figure,
    claims_preamble,
    correlation_figure,
    correlation_runs,
    fig6_panels,
    grounding_runs,
    image_query_figure,
    model_lists,
    precision_runs,
    random_images,
    specific_captions,
    train_model,
    visualise_bindings,
    visualise_judgements,
    write_heat_figures,
)
from xmr_core.chapters.recorded import recorded_tuning
from xmr_core.chapters.views import missing_views
from xmr_core.claims import claim_rows
from xmr_core.config import RunConfig, budget
from xmr_core.data.datasets import with_pixels
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.training import tuned_model

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR,
                            BACKBONE=BACKBONE, IMAGE_WEIGHTS=IMAGE_WEIGHTS, WORD_VECTORS=WORD_VECTORS, PROGRESS=PROGRESS)
seeds = run.seeds(N_SEEDS)
print(run.describe())

# %%
corpus, trunk, data, enc = chapter_setup(run)
missing = missing_views({"class": data.test_unseen, "exact": data.test}, DATASET)  # views this data set lacks: NaN
print("missing views: " + ("; ".join(missing.values()) or "none"))
tuned = recorded_tuning("dvse/tuning", run, methods=list(COMPARED))  # train.py's choices, from its table
base = tuned_model("DVSE", tuned, enc, data.word_vectors, compared=COMPARED).config
test = with_pixels(data.test)  # real data: the image files decoded for the figures (scenes: as is)
data = data.with_test(test)  # the figures below draw the test images
rng = np.random.default_rng(SEED)

# %% [markdown]
# ## Figure 6 — correlation among the sub-embeddings, per ablation
#
# Pearson correlation between the K vectors v̂^k of an image (before the dynamic mask). Top row: one random test
# image (the paper's choice); bottom row: the mean over the test split. The table holds every seed's mean
# |off-diagonal correlation|: the claims compare those.

# %%
panels = fig6_panels(ABLATION_GRIDS[budget(PROFILE)]["combination"])
image = int(rng.integers(test.n_images))
corr_runs, corr_maps = correlation_runs(panels, seeds, image, base, data, tuned, enc, run)
write_figure(correlation_figure(corr_maps, image), "dvse/fig6", run=run, caption=(
    f"Figure 6 analogue: correlation among the K sub-embeddings v̂^k (before the mask) of DVSE variants (Table V "
    f"combinations), seed {SEED}: test image {image} (top) and the mean over the {DATASET} test split (bottom)."))
write_table(corr_runs, "dvse/fig6", run=run, caption=(
    "Mean |off-diagonal correlation| among the sub-embeddings over the test split, per combination and seed."))
corr_runs.groupby("panel", sort=False)["mean |corr|"].agg(["mean", "std", "count"])

# %% [markdown]
# ## Figure 10 — where each sub-embedding attends
#
# DVSE of seed `SEED` on the grid features (4 × 4 cells of the trunk) and, where the data set has them, the region
# DVSE of `train.py` (its region boxes): one figure each (`fig10_grid`, `fig10_regions`). Above each map: the
# image's own caption that sub-embedding matches best (cosine of v^k with the caption embedding); "masked" = its
# dynamic-mask bit is 0 (Eq. 3). The heat is drawn in a perceptually uniform map (inferno) over the image in grey,
# with a colour bar per image (each image its own scale). The committed figures are from the last execution, drawn in
# jet over the coloured image without a colour bar: the restyled ones appear when this notebook is next re-executed.

# %%
heat_images = random_images(rng, test, N_HEAT)
dvse, _ = train_model("DVSE", 1, data, tuned, enc, run, SEED, weights=True)  # drawn: needs its weights
variants = attention_variants(dvse, data, tuned, enc, run, trunk.cells, seeds[0])
write_heat_figures(variants, data, heat_images, run)
plt.show()

# %% [markdown]
# Figure 10 as a number, over the whole test split and every seed of `train.py`'s grid DVSE: for each test image
# and each sub-embedding its dynamic mask leaves on, the share of its attention on the boxes of the objects named
# by the image's own caption it matches best (`xmr_core.grounding`), and the share uniform attention over the
# cells would put there (the boxes' area share of the cells: chance). Scenes only: other data sets keep no object
# boxes or logical forms.

# %%
grounding = grounding_runs(seeds, trunk.cells, data, tuned, enc, run) if DATASET == "scenes" else None
if grounding is not None:
    write_table(grounding[0], "dvse/fig10_grounding", run=run, caption=(
        f"Figure 10 measured: the mean over the {DATASET} test images of the share (pp) of DVSE's sub-embedding "
        "attention on the objects named by the caption each matches best, and under uniform attention (chance), per "
        "seed."))
    print(grounding[0].pivot(index="seed", columns="model", values="share"))

# %% [markdown]
# ## Figures 11 and 12 — retrieval lists, DVSE against PVSE
#
# Caption queries are drawn among the specific captions (full and relational levels: a vague caption matches
# hundreds of images); image queries at random. Below the lists, the same question over every query of the test
# split and every seed: how often do the top results hold the query (exact relevance)? P@4 for caption queries
# (Figure 11's four images), P@5 for image queries (Figure 12's five captions), from the runs' records (train.py's,
# with a scoring in the exact view that keeps the hits at 4 and 5). The lists themselves are drawn from the two
# models of seed `SEED` (they need the models).

# %%
pvse, _ = train_model("PVSE", 2, data, tuned, enc, run, SEED, weights=True)  # drawn: needs its weights
models = {"DVSE": dvse, "PVSE K=2": pvse}
cap_q = specific_captions(test, N_QUERIES, rng)
img_q = random_images(rng, test, N_QUERIES)
lists = model_lists(models, data, img_q, cap_q, run.torch_device)
write_table(lists, "dvse/fig11_12_lists", run=run, caption=(
    f"Figures 11-12 analogue: top-4 images of {N_QUERIES} caption queries and top-5 captions of {N_QUERIES} image "
    f"queries, DVSE and PVSE K=2 (seed {SEED}, no FR); exact = the caption holds in the image, instance = the "
    "dataset's ground truth, zeta = concept-label differences from the query's image."))
write_figure(caption_query_figure(lists, test, cap_q, list(models)), "dvse/fig11", run=run, caption=(
    "Figure 11 analogue: top-4 images per caption query, DVSE and PVSE K=2 in turn; green = the caption holds in the "
    f"image (exact relevance), red = it does not ({DATASET}, seed {SEED})."))
write_figure(image_query_figure(lists, test, img_q, list(models)), "dvse/fig12", run=run, caption=(
    "Figure 12 analogue: top-5 captions per image query, DVSE and PVSE K=2 in turn; green = the caption holds in the "
    f"image, red = it does not, '(True)' = written for this image ({DATASET}, seed {SEED})."))
plt.show()

# %%
precision = precision_runs(seeds, data, tuned, enc, run)
write_table(precision.runs, "dvse/fig11_12_precision", run=run, caption=(
    f"Share of the top results that hold the query (exact relevance) over every query of the {DATASET} test split: "
    "P@4 of caption queries, P@5 of image queries, DVSE and PVSE K=2, every seed, no FR."
    + (f" Not measured: {missing['exact']}." if "exact" in missing else "")))
precision.runs.groupby("model")[["t2i P@4", "i2t P@5"]].agg(["mean", "std"])

# %% [markdown]
# ## The claims of the chapter
#
# train.py's and ablate.py's claims (read back from their tables), then this notebook's (`VISUALISE_CLAIMS`):
# Figure 6's correlations and Figures 11–12's precision, judged by the book's one verdict protocol
# (`xmr_core.claims.judge`: a 95% interval over the seeds, paired by seed); Figures 11–12's on each query's P@K from
# the records (paired by seed and query; bound to them in `claim_records_visualise.json` for `xmr claims recompute
# dvse`); Figure 10's on every test image of every seed against chance (paired by seed and image).

# %%
bindings = visualise_bindings(precision, run, missing)
judged = visualise_judgements(corr_runs, precision, grounding, bindings, run, missing)
write_judgements(judged, "dvse", "visualise", run)
write_bindings(list(bindings.values()), run)
claims = notebook_claims(run, "dvse") + [Claim(**row) for row in claim_rows(judged).to_dict("records")]
write_claims(claims, "dvse", run=run, preamble=claims_preamble(PROFILE, DATASET))
claims_frame(claims)
