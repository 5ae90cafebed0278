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
# # HREM 2 — ablations, sensitivity, special samples and retrieval time (Tables 3–4, Figures 5–7)
#
# Starting from `train.py`'s HREM fusion (its tuned learning rate and margin; its runs are loaded from the cache),
# one thing changes at a time (`xmr_core.methods.hrem`'s docstring, item 15, names the config fields):
#
# - **Table 3a**: each relation level removed: the visual and textual fragment-level attention, the intra- and
#   inter-modal blocks of the association graph (both off: no instance-level module at all);
# - **Table 3b**: each component: the connection matrix A (all ones), the relevance matrix S (zero, no L_reg),
#   the consistency terms of L_cross, the regulariser L_reg, the neighbour batches;
# - **Figure 6**: λ of Eq. (12), K of Eq. (8) and τ of Eq. (5–6), one seed per non-default value (the default is
#   the HREM fusion of every seed);
# - **Figure 7**: the triplet loss of the enhanced embeddings L(v̄, ū) and of the initial ones L(v, u) over
#   training, from the HREM fusion runs' history (the first two terms of Eq. 14, as `HREM.loss` logs them);
# - **Table 4**: R@1 on hard and infrequent test queries (below), with and without sample interaction;
# - **Figure 5**: accuracy against retrieval time, in one run on this machine: the embedding-based models (one
#   embedding per item, dot products) against SCAN's t2i cross attention (`xmr_core.methods.scan`), whose score
#   needs every image × caption pair.
#
# The paper runs Tables 3–4 and Figures 6–7 with Region + BERT on Flickr30K; we use Region + BiGRU (the BERT rows
# are paper-profile only, see `train.py`) on the whole scenes test split, which has Flickr30K's test size. Table 3's
# rows get `N_SEEDS` seeds, as each is compared with HREM. Scenes numbers are not the paper's: compare signs and
# orderings.
#
# **Table 4's samples.** The paper selects them "by the percentile rank of average embedding similarity between
# themselves and other samples", both kinds getting "high average similarity with other negative samples". We read
# *hard* (semantic ambiguity) as the mean cosine of a query to the other modality's items it does not match, and
# *infrequent* (semantic scarcity: a rare sample among many of similar themes, Fig. 1c) as the mean cosine to the
# other samples of its own modality (captions: those of other images); a query is in the top p% when its value is
# among the round(p/100 · Q) highest. The values are computed on the embeddings of a third model, VSE++ of the same
# seed, so that the subsets are not chosen by either compared model (selecting on one of them would favour the
# other by regression to the mean). Compared: HREM fusion (✓ sample interaction) and its "w/o instance level" row
# of Table 3a.

# %% tags=["parameters"]
PROFILE = "cpu"
DATASET = "scenes"
DATA_ROOT = ""
DATA_SEED = 0  # generates the benchmark; SEED below only seeds training
SEED = 0
DEVICE = "auto"
RESULTS_DIR = "results"
PROGRESS = True
N_SEEDS = 3  # must match train.py, whose runs are reused

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from xmr_core.chapters.dvse import peak
from xmr_core.chapters.hrem import (
    DATA_FORMAT,
    FIG6_DEFAULTS,
    FIG6_GRIDS,
    MODELS,
    SCAN_MODEL,
    TABLE3_COLUMNS,
    TABLE3_ROWS,
    TABLE3A,
    TABLE3B,
    TABLE4_PERCENTS,
    ablation_config,
    hrem_data,
    hrem_encoders,
    hrem_table,
    loss_curves,
    metric_row,
    row_comparison,
    score_split,
    sweep_gain,
    table4_rows,
    train_model,
    training_runs,
    tune_methods,
)
from xmr_core.chapters.summary import compare_models
from xmr_core.config import RunConfig
from xmr_core.data.load import load_corpus
from xmr_core.evaluate import embed_split
from xmr_core.results import require_converged, universal_verdict, verdict, write_figure, write_table

run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, DATA_ROOT=DATA_ROOT, DATA_SEED=DATA_SEED, SEED=SEED,
                            DEVICE=DEVICE, RESULTS_DIR=RESULTS_DIR, PROGRESS=PROGRESS)
seeds = run.seeds(N_SEEDS)
print(run.describe())
print(f"Table 3 rows: {TABLE3_ROWS[PROFILE]}; Figure 6 grids: {FIG6_GRIDS[PROFILE]}; Table 4 percents: {TABLE4_PERCENTS}")
training_runs(PROFILE, N_SEEDS)

# %%
corpus = load_corpus(DATASET, DATA_ROOT, PROFILE, format=DATA_FORMAT, progress=PROGRESS, seed=DATA_SEED)
data = hrem_data(corpus)
test = data.test
enc = hrem_encoders(PROFILE, test.regions.shape[2])
tuned = tune_methods(PROFILE, enc, data, seed=SEED, device=DEVICE, progress=PROGRESS)  # train.py's, from the cache
device = run.torch_device
label = DATASET
not_f30k = " (the synthetic scenes benchmark: NOT Flickr30K; compare signs and orderings)" if DATASET == "scenes" else ""
print(f"HREM fusion: lr {tuned['HREM fusion'].lr}, margin {tuned['HREM fusion'].weight}")

# %% [markdown]
# ## Table 3 — each relation level and component removed
#
# Every row is HREM fusion with one change, trained with every seed; "HREM" is `train.py`'s model (cached). The
# scores of HREM and of "w/o instance level" are kept for Table 4.

# %%
rows, fits, kept = [], {}, {}
variants = {"HREM": {}, **{name: {**TABLE3A, **TABLE3B}[name] for name in TABLE3_ROWS[PROFILE]}}
for seed in seeds:
    for name, changes in variants.items():
        model, result = train_model("HREM fusion", data, tuned, enc, run, seed,
                                    config=ablation_config(enc, PROFILE, tuned, **changes))
        scores = score_split(model, test, data.vocab, device)
        fits[name, seed] = result
        if name in ("HREM", "w/o instance level"):
            kept[name, seed] = scores
        rows.append({"model": name, "seed": seed, "converged": result.converged, "cached": result.cached,
                     "best epoch": result.best_epoch, **metric_row(test, scores)})
t3 = pd.DataFrame(rows)
t3_cols = {**TABLE3_COLUMNS, "all rSum": "rsum"}
tables3 = {}
for part, names in (("table3a", TABLE3A), ("table3b", TABLE3B)):
    order = ["HREM"] + [n for n in names if n in variants]
    tables3[part] = hrem_table(t3, order, part, t3_cols, label)
    write_table(tables3[part], f"hrem/{part}", run=run, caption=(
        f"HREM Table {part[-2:]} analogue: HREM fusion with one relation {'level' if part == 'table3a' else 'component'} "
        f"removed. Paper: Flickr30K, Region + BERT (R@1 and R@5). Ours: {DATASET}{not_f30k}, Region + BiGRU, the whole "
        f"test split ({test.n_images} images), profile {PROFILE}; mean over seeds {seeds} (std where > 1); rSum is "
        "ours only (the paper's Table 3 has none)."))
write_table(t3, "hrem/table3_per_seed", run=run, caption="Table 3 per row and seed (the claims are checked on these).")
tables3["table3a"]

# %%
tables3["table3b"]

# %% [markdown]
# ## Figure 6 — λ, K and τ
#
# One seed per non-default value; the default (λ 1.5, K 10, τ 0.5) is HREM fusion, mean ± seed std. rSum on the
# whole test split.

# %%
sweep_rows = []
for param, grid in FIG6_GRIDS[PROFILE].items():
    for value in grid:
        if value == FIG6_DEFAULTS[param]:
            sweep_rows += [{"param": param, "value": value, "seed": r["seed"], "all rSum": r["all rSum"],
                            "converged": r["converged"]} for r in rows if r["model"] == "HREM"]
            continue
        model, result = train_model("HREM fusion", data, tuned, enc, run, SEED,
                                    config=ablation_config(enc, PROFILE, tuned, **{param: value}))
        sweep_rows.append({"param": param, "value": value, "seed": SEED, "converged": result.converged,
                           "all rSum": metric_row(test, score_split(model, test, data.vocab, device))["all rSum"]})
sweeps = pd.DataFrame(sweep_rows)
summary6 = sweeps.groupby(["param", "value"], sort=False)["all rSum"].agg(["mean", "std", "count"]).reset_index()
titles = {"lam": "(a) λ, weight of S in Eq. (12)", "topk": "(b) K, matches of Eq. (8)", "tau": "(c) τ, neighbours"}
fig6, axes = plt.subplots(1, 3, figsize=(12, 3.4))
for ax, (param, title) in zip(axes, titles.items()):
    part = summary6[summary6["param"] == param]
    ax.errorbar(part["value"], part["mean"], yerr=part["std"].fillna(0.0), marker="o", capsize=3)
    ax.axvline(FIG6_DEFAULTS[param], color="gray", ls=":", lw=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(param)
axes[0].set_ylabel(f"rSum, whole test split ({DATASET})")
fig6.tight_layout()
write_figure(fig6, "hrem/fig6", run=run, caption=(
    f"Figure 6 analogue: HREM fusion's rSum on the whole {DATASET} test split against λ, K and τ (Region + BiGRU; "
    f"non-default values: seed {SEED}; default, dotted: mean ± std over seeds {seeds})."))
write_table(sweeps, "hrem/fig6", run=run, caption="Figure 6 runs: rSum per swept value and seed.")
plt.show()

# %% [markdown]
# ## Figure 7 — the triplet loss of the enhanced and the initial embeddings
#
# Per epoch, the training means of L(v̄, ū) and L(v, u) (Eq. 13 with distance-weighted negatives, the loss HREM
# trains), mean over the HREM fusion seeds.

# %%
curves = pd.concat([loss_curves(fits["HREM", s].history).assign(seed=s) for s in seeds], ignore_index=True)
mean_curves = curves.groupby("epoch")[["initial", "enhanced"]].mean()
fig7, ax = plt.subplots(figsize=(5, 3.4))
ax.plot(mean_curves.index, mean_curves["enhanced"], marker="o", label="enhanced embeddings L(v̄, ū)")
ax.plot(mean_curves.index, mean_curves["initial"], marker="s", label="initial embeddings L(v, u)")
ax.set_xlabel("epoch")
ax.set_ylabel("triplet loss (training mean)")
ax.legend(fontsize=8)
write_figure(fig7, "hrem/fig7", run=run, caption=(
    f"Figure 7 analogue: triplet loss of the enhanced and of the initial embeddings per epoch, HREM fusion, mean over "
    f"seeds {seeds} ({DATASET}, Region + BiGRU, distance-weighted negatives)."))
write_table(curves, "hrem/fig7", run=run, caption="Figure 7: the triplet loss terms per epoch and seed.", float_digits=3)
plt.show()

# %% [markdown]
# ## Table 4 — hard and infrequent samples

# %%
t4_rows = []
for seed in seeds:
    selector, _ = train_model("VSE++", data, tuned, enc, run, seed)  # train.py's, from the cache
    scored = {"HREM fusion (sample interaction)": kept["HREM", seed]}
    if ("w/o instance level", seed) in kept:
        scored["w/o instance level (no sample interaction)"] = kept["w/o instance level", seed]
    t4_rows += table4_rows(test, embed_split(selector, test, data.vocab, device=device), scored, seed)
t4 = pd.DataFrame(t4_rows)
table4 = t4.groupby(["samples", "percent", "model"], sort=False)[["i2t R@1", "t2i R@1"]].agg(["mean", "std"])
table4.columns = [f"{a} {b}" for a, b in table4.columns]
table4 = table4.reset_index()
write_table(table4, "hrem/table4", run=run, caption=(
    f"HREM Table 4 analogue: R@1 on the hardest and the most 'infrequent' test queries (top 5/10/20% by the mean "
    f"cosine to their negatives, on VSE++'s embeddings of the same seed; definitions in ablate.py), {DATASET}"
    f"{not_f30k}, whole test split, mean and std over seeds {seeds}. The paper's Table 4 (Flickr30K and COCO 5K) is "
    "not transcribed: in our copy of the paper its rows lost their structure (10 value rows for 12 labels)."))
write_table(t4, "hrem/table4_per_seed", run=run, caption="Table 4 per kind, percent, model and seed.")
table4

# %% [markdown]
# ## Figure 5 — accuracy against retrieval time, in one run
#
# For each seed, every model embeds and scores the whole test split once on this machine (`test s`: both sides
# encoded and every image × caption score computed); rSum on the same split. SCAN t2i is trained at VSE++'s tuned
# learning rate and margin (the same hinge), with no tuning of its own. The paper: the whole Flickr30K test split on
# one RTX 3090.

# %%
t5_rows = []
for seed in seeds:
    for name in MODELS + [SCAN_MODEL]:
        model, result = train_model(name, data, tuned, enc, run, seed)
        scores = score_split(model, test, data.vocab, device)
        t5_rows.append({"model": name, "seed": seed, "converged": result.converged, "test s": scores.seconds,
                        "all rSum": metric_row(test, scores)["all rSum"]})
t5 = pd.DataFrame(t5_rows)
fig5_summary = t5.groupby("model", sort=False)[["test s", "all rSum"]].agg(["mean", "std"])
fig5_summary.columns = [f"{a} {b}" for a, b in fig5_summary.columns]
fig5, ax = plt.subplots(figsize=(5.5, 3.8))
for name, r in fig5_summary.iterrows():
    ax.errorbar(r["test s mean"], r["all rSum mean"], xerr=np.nan_to_num(r["test s std"]),
                yerr=np.nan_to_num(r["all rSum std"]), marker="s" if name == SCAN_MODEL else "o", label=name, capsize=3)
ax.set_xscale("log")
ax.set_xlabel(f"seconds to embed and score the test split ({device})")
ax.set_ylabel(f"rSum ({DATASET})")
ax.legend(fontsize=8)
write_figure(fig5, "hrem/fig5", run=run, caption=(
    f"Figure 5 analogue: rSum against the time to embed and score the whole {DATASET} test split ({test.n_images} x "
    f"{test.n_captions}) on {device}, mean ± std over seeds {seeds}; squares: score-based (SCAN t2i), circles: "
    "embedding-based (one dot product per pair)."))
write_table(t5, "hrem/fig5", run=run, caption="Figure 5 per model and seed: seconds to embed and score, and rSum.",
            float_digits=3)
plt.show()
fig5_summary

# %% [markdown]
# ## Claims checked here

# %%
t3_conv = t3.groupby("model")["converged"].all().to_dict()
cols3 = list(TABLE3_COLUMNS)
unit3 = "pp (mean of R@1 and R@5 both ways)"
claims = []
for a, b, text, source in [
    ("HREM", "w/o instance level", "Instance-level relation modelling improves the embeddings.", "Sec. 4.3, Table 3a"),
    ("HREM", "w/o fragment level", "Fragment-level relation modelling improves the embeddings.", "Sec. 4.3, Table 3a"),
    ("w/o fragment level", "w/o instance level", "The instance-level relation matters more than the fragment-level one.",
     "Sec. 4.3, Table 3a"),
    ("w/o intra-modal", "w/o inter-modal", ("Within the instance level, the inter-modal relation matters more than "
                                            "the intra-modal one."), "Sec. 4.3, Table 3a"),
    ("w/o textual fragment", "w/o visual fragment", ("Fragment-level relations of the words are nearly redundant, "
                                                     "those of the regions are not (removing the textual one costs "
                                                     "less)."), "Sec. 4.3, Table 3a"),
    ("HREM", "w/o visual fragment", "Modelling the relations among regions is meaningful.", "Sec. 4.3, Table 3a"),
    ("HREM", "w/o connection A", "The connection matrix A is significant.", "Sec. 4.3, Table 3b"),
    ("HREM", "w/o relevance S", "The relevance matrix S is significant.", "Sec. 4.3, Table 3b"),
    ("HREM", "w/o L_cross", "The consistency loss L_cross is indispensable.", "Sec. 4.3, Table 3b"),
    ("HREM", "w/o L_reg", "The regulariser L_reg improves the performance.", "Sec. 4.3, Table 3b"),
    ("HREM", "w/o neighbour sampling", "Neighbour batch sampling helps.", "Sec. 4.3, Table 3b"),
]:
    v, e = row_comparison(t3, a, b, cols3, t3_conv, unit3)
    claims.append({"claim": text, "source": source, "evidence": e, "verdict": v})
others3a = [n for n in TABLE3A if n in variants]
worst_gap = [row_comparison(t3, "HREM", n, cols3, t3_conv, unit3) for n in others3a]
claims.append({"claim": "Modelling all hierarchical relations gives the best result (HREM above every Table 3a row).",
               "source": "Sec. 4.3, Table 3a",
               "evidence": "; ".join(e for _, e in worst_gap) + ("" if len(others3a) == len(TABLE3A) else
                                                               f"; only {len(others3a)} of {len(TABLE3A)} rows trained"),
               "verdict": universal_verdict([v for v, _ in worst_gap]) if len(others3a) == len(TABLE3A) else
               verdict(None)})

default_std = float(sweeps[(sweeps["param"] == "lam") & (sweeps["value"] == FIG6_DEFAULTS["lam"])]["all rSum"].std())
by_param = {p: summary6[summary6["param"] == p].set_index("value")["mean"].to_dict() for p in FIG6_GRIDS[PROFILE]}
conv6 = bool(sweeps["converged"].all())
lam_diff, lam_v = sweep_gain(by_param["lam"], FIG6_DEFAULTS["lam"], 0.0, default_std)
claims.append({"claim": "λ must be large enough: the relevance bias S helps attention (λ = 1.5 above λ = 0).",
               "source": "Sec. 4.3, Figure 6(a)",
               "evidence": f"rSum(λ 1.5) - rSum(λ 0) = {lam_diff:+.2f} (λ 0: one seed; spread = the default's seed std "
                           f"{default_std:.2f})", "verdict": lam_v if conv6 else "not tested"})
for param, text, source in (("topk", "K cannot be too large (short texts): rSum peaks inside the K grid.", "Figure 6(b)"),
                            ("tau", "τ is not meaningful close to 0 or 1: rSum peaks inside the τ grid.", "Figure 6(c)")):
    best, diff, v = peak(by_param[param], default_std)
    claims.append({"claim": text, "source": f"Sec. 4.3, {source}", "verdict": v if conv6 else "not tested",
                   "evidence": f"best {param} = {best}; best interior - best end = {diff:+.2f} rSum (one seed per "
                               f"value; spread = the default's seed std {default_std:.2f})"})
claims.append({"claim": "HREM is insensitive to λ, K and τ within a proper range.", "source": "Sec. 4.3, Figure 6",
               "evidence": "rSum range over each grid: " + "; ".join(
                   f"{p} {max(v.values()) - min(v.values()):.1f}" for p, v in by_param.items())
               + "; the paper gives no threshold for 'relatively stable'", "verdict": verdict(None)})

losses = curves.dropna().groupby("seed")[["initial", "enhanced"]].mean().reset_index()
loss_runs = pd.concat([losses.assign(model=m, loss=losses[m]) for m in ("initial", "enhanced")], ignore_index=True)
lc = compare_models(loss_runs, "initial", "enhanced", ["loss"])
v, e = require_converged(lc.verdict, f"mean over epochs of L(v, u) - L(v̄, ū) = {lc.diff:+.4f} (largest seed std "
                         f"{lc.spread:.4f})", ["HREM"], t3_conv)
claims.append({"claim": "The triplet loss of the enhanced embeddings is lower than that of the initial ones "
               "(the relation module recognises hard samples).", "source": "Sec. 4.3, Figure 7", "evidence": e,
               "verdict": v})

with_si, without_si = "HREM fusion (sample interaction)", "w/o instance level (no sample interaction)"
for kind in ("hard", "infrequent"):
    part = t4[t4["samples"] == kind]
    per_seed = part.groupby(["model", "seed"])[["i2t R@1", "t2i R@1"]].mean().reset_index()
    conv4 = {with_si: t3_conv["HREM"], without_si: t3_conv.get("w/o instance level", False)}
    if without_si in set(per_seed["model"]):
        v, e = row_comparison(per_seed, with_si, without_si, ["i2t R@1", "t2i R@1"], conv4,
                              f"pp of R@1 (mean over both directions and the {TABLE4_PERCENTS} % subsets)")
    else:
        v, e = verdict(None), "w/o instance level not trained in this profile"
    claims.append({"claim": f"Sample relation modelling improves the {kind} samples significantly.",
                   "source": "Sec. 4.3, Table 4", "evidence": e, "verdict": v})

conv5 = t5.groupby("model")["converged"].all().to_dict()
speed = t5.pivot(index="seed", columns="model", values="test s")
ratio = speed[SCAN_MODEL] / speed["HREM fusion"]
claims.append({"claim": "HREM retrieves more than 10 times faster than a score-based method.",
               "source": "Sec. 4.3, Figure 5",
               "evidence": f"SCAN t2i / HREM fusion time to embed and score the test split: {ratio.mean():.1f}x "
                           f"(min {ratio.min():.1f}x over seeds {seeds}; {test.n_images} x {test.n_captions} on {device})"
                           + ("" if len(seeds) > 1 else "; one timing: not tested"),
               "verdict": verdict(bool(ratio.min() > 10) if len(seeds) > 1 else None)})
v, e = row_comparison(t5, "HREM fusion", SCAN_MODEL, ["all rSum"], conv5, "rSum")
claims.append({"claim": "HREM reaches a higher rSum than score-based matching (here SCAN t2i).",
               "source": "Sec. 3.5, Figure 5", "evidence": e + "; SCAN t2i at VSE++'s tuned setting, not tuned itself", "verdict": v})
claims_table = pd.DataFrame(claims)
write_table(claims_table, "hrem/claims_ablate", run=run,
            caption="Claims checked by ablate.py (collected into claims.md by visualise.py).")
claims_table
