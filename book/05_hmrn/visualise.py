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
# # HMRN 3 — round-by-round retrieval, cross attention, the inter-correlation graph, and the claims
#
# All from `train.py`'s seed-`SEED` models, loaded from the run cache:
#
# 1. **Per-round galleries**: for a few test query sets, the top images after each round, the target framed green,
#    and the target's rank as queries are added (the HMRN ensemble, Eq. 17).
# 2. **Cross attention on the image**: Eq. (7)'s text→image weights of each of an image's own queries over its
#    regions (HMRN T-I, λ2), drawn as heat over the pixels each region box covers (the paper's Fig. 9 shows the
#    top-1 region of each query).
# 3. **The inter-correlation graph** of one image with its own query set: Eq. (15)'s affinity between the N + 1
#    region–query nodes (the global node last) at each reasoning step of HMRN I-T (the paper's Fig. 4).
#
# The claims of the three notebooks are collected into `results/hmrn/claims.md`.

# %% tags=["parameters"]
PROFILE = "cpu"
DATASET = "scenes"
DATA_ROOT = ""
DATA_SEED = 0
SEED = 0
DEVICE = "auto"
RESULTS_DIR = ""  # empty: the own folder of the profile and data set (`results.results_folder`)
WORD_VECTORS = ""  # the GloVe 300-d file of the papers; empty = the packaged GloVe 6B 50-d (named substitute)
PROGRESS = True
N_GALLERY = 3  # query sets drawn round by round
TOP_K = 5  # images shown per round

# %%
import matplotlib.pyplot as plt
import numpy as np

from xmr_core.book.results import claims_frame, notebook_claims, write_claims, write_figure, write_table
from xmr_core.chapters.hmrn import (
    DATA_FORMAT,
    IT,
    OFFICIAL_CODE_NOTE,
    TI,
    VARIANT,
    attention_figure,
    correlation_graph,
    ensemble_scores,
    graph_figure,
    hmrn_data,
    hmrn_encoders,
    query_attention,
    score_rounds,
    train_variant,
    write_galleries,
)
from xmr_core.chapters.recorded import recorded_tuning
from xmr_core.config import RunConfig
from xmr_core.data.load import load_corpus
from xmr_core.experiment.paper_encoders import chosen_word_vectors
from xmr_core.experiment.scorepool import score_trained

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR, WORD_VECTORS=WORD_VECTORS, PROGRESS=PROGRESS)
print(run.describe())

# %%
corpus = load_corpus(DATASET, DATA_ROOT, PROFILE, format=DATA_FORMAT, variant=VARIANT, progress=PROGRESS,
                     seed=DATA_SEED)
data = hmrn_data(corpus, PROFILE, chosen_word_vectors(run))
test, vocab = data.multi.test, data.multi.vocab
enc = hmrn_encoders(PROFILE, test.regions.shape[2])
tuned = recorded_tuning("hmrn/tuning", run)  # the settings train.py chose, read from its tuning table
it_model, it_fit = train_variant(IT, data, tuned, enc, run, SEED)
ti_model, ti_fit = train_variant(TI, data, tuned, enc, run, SEED)
(_, it_scores), (_, ti_scores) = score_trained(score_rounds, [(it_model, it_fit), (ti_model, ti_fit)], test, vocab,
                                               run.torch_device)  # train.py's scores, from the score cache
scores = ensemble_scores(it_scores, ti_scores)
rng = np.random.default_rng(SEED)
picked = rng.choice(test.n_images, size=min(N_GALLERY, test.n_images), replace=False)
print(f"query sets drawn: {picked.tolist()}")

# %% [markdown]
# ## 1. Retrieval round by round (HMRN ensemble)

# %%
rank_table = write_galleries(scores.scores, test, picked.tolist(), TOP_K, run)
write_table(rank_table.reset_index(), "hmrn/gallery_ranks", run=run, caption="The target's rank after each round for "
            "the drawn query sets (HMRN ensemble, pessimistic ranks).")
plt.show()
rank_table

# %% [markdown]
# ## 2. Text→image cross attention drawn on the image (HMRN T-I)

# %%
image = int(picked[0])
weights, heat = query_attention(ti_model, test, vocab, image)
queries = test.queries[image][: weights.shape[1]]
fig = attention_figure(test, image, weights, heat, queries)
write_figure(fig, "hmrn/attention", run=run, caption=f"Eq. (7)'s weights of each of test image {image}'s queries over "
             "its regions (HMRN T-I), summed over the pixels each region box covers.")
plt.show()

# %% [markdown]
# ## 3. The inter-correlation graph of one image (HMRN I-T)

# %%
graphs = correlation_graph(it_model, test, vocab, image)
fig = graph_figure(graphs, len(queries))
write_figure(fig, "hmrn/correlation_graph", run=run, caption=f"Eq. (15)'s affinity among the region-query pairs of test "
             f"image {image} and its own queries ({', '.join(queries)}), per reasoning step (HMRN I-T).")
plt.show()

# %% [markdown]
# ## The claims of the chapter

# %%
claims = notebook_claims(run, "hmrn")
preamble = (
    "Each claim of the paper's experiments (Sec. 4) with what this run says of it, judged by the book's verdict "
    "protocol (docs/claims.md: the effect with a 95% bootstrap interval over the seeds and, where the notebook scored "
    "the runs, the test query sets, paired where the sides share seeds or query sets; margins declared with the "
    "claim; not tested on runs that did not converge or collapsed, `claims.detect_collapse` on every round's "
    "scores). The evidence column gives each claim's effect, interval, seeds / query sets and pairing. Scenes numbers "
    "are not Visual Genome numbers: the claims are orderings and trends.\n\n" + OFFICIAL_CODE_NOTE)
write_claims(claims, "hmrn", run=run, preamble=preamble)
claims_frame(claims)
