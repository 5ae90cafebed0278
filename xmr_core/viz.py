"""Figures shared by the chapters: Gaussian confidence ellipses, annotated heatmaps, sensitivity sweeps, image and
caption galleries.

Every function draws on a matplotlib `Axes` (or returns a new `Figure`) and never saves anything:
chapters save through `xmr_core.book.results.write_figure`. Gaussians follow the library convention, a pair
`(mu, logvar)` with `logvar = log sigma^2` per dimension (diagonal covariance).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse, Rectangle


def chi2_radius(level: float) -> float:
    """Mahalanobis radius of the `level` confidence region of a 2-D Gaussian.

    For 2 degrees of freedom the chi-square CDF is 1 - exp(-r^2 / 2), so r = sqrt(-2 log(1 - level)).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    return math.sqrt(-2.0 * math.log1p(-level))


def pca_basis(points: np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Centre (D,) and the top-k principal directions (k, D) of points (N, D)."""
    points = np.asarray(points, dtype=np.float64)
    centre = points.mean(0)
    _, _, vt = np.linalg.svd(points - centre, full_matrices=False)
    return centre, vt[:k]


def project_gaussians(
    mu: np.ndarray, logvar: np.ndarray, centre: np.ndarray, basis: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Project diagonal Gaussians (N, D) onto orthonormal directions `basis` (k, D): the exact marginal
    means (N, k) and per-direction log-variances (N, k), var_k = sum_d basis_kd^2 sigma_d^2 (the covariance
    between the k directions is dropped, so the drawn ellipses are axis-aligned)."""
    mu, logvar = np.asarray(mu, dtype=np.float64), np.asarray(logvar, dtype=np.float64)
    var = (np.asarray(basis) ** 2) @ np.exp(logvar).T  # (k, N)
    return (mu - centre) @ np.asarray(basis).T, np.log(var.T)


def confidence_ellipses(
    ax: Axes,
    mu: np.ndarray,
    logvar: np.ndarray,
    colors: Sequence | str = "C0",
    level: float = 0.5,
    fill_alpha: float = 0.15,
    scale: float = 1.0,
    **kwargs,
) -> list[Ellipse]:
    """Draw the `level` confidence ellipse of each 2-D diagonal Gaussian, its semi-axes times `scale` (a figure
    whose σ are small beside the spread of the means draws them larger and says so: `sigma_scale`).

    mu, logvar: (N, 2). colors: one colour or N colours. The ellipse of item n has semi-axes
    scale * r * sigma_n along the coordinate axes, r = `chi2_radius(level)`.
    """
    mu, logvar = np.asarray(mu, dtype=float), np.asarray(logvar, dtype=float)
    if mu.ndim != 2 or mu.shape[1] != 2 or logvar.shape != mu.shape:
        raise ValueError(f"expected mu and logvar of shape (N, 2), got {mu.shape} and {logvar.shape}")
    if not (np.isfinite(mu).all() and np.isfinite(logvar).all()):
        raise ValueError("mu or logvar contains NaN or inf")
    colors = [colors] * len(mu) if isinstance(colors, str) else list(colors)
    if len(colors) != len(mu):
        raise ValueError(f"{len(colors)} colours for {len(mu)} Gaussians")
    radius = chi2_radius(level) * scale
    sigma = np.exp(0.5 * logvar)
    patches = []
    for (x, y), (sx, sy), colour in zip(mu, sigma, colors):
        face = plt.matplotlib.colors.to_rgba(colour, fill_alpha)
        patch = Ellipse((x, y), 2 * radius * sx, 2 * radius * sy, facecolor=face, edgecolor=colour, **kwargs)
        ax.add_patch(patch)
        patches.append(patch)
    span_lo = (mu - radius * sigma).min(0)
    span_hi = (mu + radius * sigma).max(0)
    ax.update_datalim(np.stack([span_lo, span_hi]))
    ax.autoscale_view()
    return patches


SHAPE_MARKERS = {"circle": "o", "square": "s", "triangle": "^", "diamond": "D", "star": "*", "cross": "X"}


def class_styles(names: Sequence[str], rgb: Mapping[str, Sequence[int]]) -> list[tuple[tuple[float, ...], str]]:
    """(colour, marker) of each class name: the colour its name says ("red circle" -> `rgb["red"]` / 255), else a
    tab10 colour by position; the marker its shape word says (`SHAPE_MARKERS`), else "o". So a class is drawn in
    the colour its label names."""
    styles = []
    for i, name in enumerate(names):
        words = name.lower().split()
        colour = next((tuple(v / 255 for v in rgb[w]) for w in words if w in rgb), None)
        marker = next((SHAPE_MARKERS[w] for w in words if w in SHAPE_MARKERS), "o")
        styles.append((colour or plt.matplotlib.colors.to_rgb(f"C{i % 10}"), marker))
    return styles


def sigma_scale(mu: np.ndarray, logvar: np.ndarray, level: float = 0.5, share: float = 0.03) -> float:
    """The factor (1, 2, 5 x a power of ten, at least 1) by which to draw the `level` ellipses of (N, 2) Gaussians
    so that the median semi-axis is at least `share` of the means' span: σ then stays visible beside the spread
    of the means, and the figure states the factor."""
    mu, logvar = np.asarray(mu, dtype=float), np.asarray(logvar, dtype=float)
    drawn = chi2_radius(level) * float(np.median(np.exp(0.5 * logvar)))
    span = float(np.ptp(mu, axis=0).max()) if len(mu) > 1 else 0.0
    if drawn <= 0 or span <= 0 or drawn >= share * span:
        return 1.0
    need = share * span / drawn
    exponent = math.floor(math.log10(need))
    return float(next(m * 10 ** exponent for m in (1, 2, 5, 10) if m * 10 ** exponent >= need))


HEAT_CMAP = "inferno"  # perceptually uniform: equal steps of attention look like equal steps of colour
LUMINANCE = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 weights of R, G, B


def heat_overlay(ax: Axes, image: np.ndarray, heat: np.ndarray, vmin: float, vmax: float,
                 mask: np.ndarray | None = None, alpha: float = 0.6) -> plt.matplotlib.image.AxesImage:
    """`heat` (S, S) in `HEAT_CMAP` over `image` (S, S, 3) uint8 drawn in grey (its luminance: the shapes' own
    colours would mix with the colour map's), left clear where `mask` (S, S) is False. Returns the heat's image,
    for a colour bar."""
    ax.imshow(np.asarray(image, dtype=float) @ LUMINANCE / 255.0, cmap="gray", vmin=0.0, vmax=1.0)
    shown = heat if mask is None else np.ma.masked_where(~np.asarray(mask, dtype=bool), heat)
    return ax.imshow(shown, cmap=HEAT_CMAP, alpha=alpha, vmin=vmin, vmax=vmax)


def heatmap(
    ax: Axes,
    values: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    fmt: str = "{:.1f}",
    cmap: str = "viridis",
    colorbar: bool = True,
    colour_by_column: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
) -> None:
    """An annotated (rows x cols) heatmap; NaN cells are left blank. colour_by_column: colour each column from
    its own minimum to its maximum (for columns of different metrics; the annotations stay the values).
    vmin / vmax: a fixed colour range (default: the colours' range), so that several heatmaps share one scale."""
    values = np.asarray(values, dtype=float)
    if values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values of shape {values.shape} for {len(row_labels)} x {len(col_labels)} labels")
    colours = column_scaled(values) if colour_by_column else values
    image = ax.imshow(np.ma.masked_invalid(colours), cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(col_labels)), labels=list(col_labels), rotation=30, ha="right")
    ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    finite = colours[np.isfinite(colours)]
    lo = vmin if vmin is not None else (finite.min() if finite.size else 0.0)
    hi = vmax if vmax is not None else (finite.max() if finite.size else 0.0)
    middle = (lo + hi) / 2
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            if np.isfinite(values[r, c]):
                colour = "black" if colours[r, c] > middle else "white"
                ax.text(c, r, fmt.format(values[r, c]), ha="center", va="center", color=colour, fontsize=8)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)


def column_scaled(values: np.ndarray) -> np.ndarray:
    """(R, C) values -> each column mapped linearly onto [0, 1] from its finite minimum to its maximum (a constant
    column -> 0.5); NaN stays NaN."""
    values = np.asarray(values, dtype=float)
    lo, hi = np.nanmin(values, axis=0, initial=np.inf, where=np.isfinite(values)), \
        np.nanmax(values, axis=0, initial=-np.inf, where=np.isfinite(values))
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(span > 0, (values - lo) / np.where(span > 0, span, 1.0), 0.5)
    return np.where(np.isfinite(values), scaled, np.nan)


def sweep_grid(sweep: pd.DataFrame, panels: Sequence[tuple[str, str]], columns: Sequence[str], unit: str,
               defaults: Mapping[str, float] | None = None) -> Figure:
    """Sensitivity sweeps: one row of panels per metric of `columns` (its own y range, shared along the row: a sweep
    moves a metric by a few points, invisible on one 0-100 axis for every metric), one column per (parameter,
    title) of `panels`; each panel the mean over each value's rows (seeds) ± their std (no bar for a single row).
    `sweep`: one row per run, columns parameter, value and `columns`; `unit`: the metrics' common y label;
    `defaults`: a parameter's default value, marked by a dotted vertical line in its column."""
    fig, axes = plt.subplots(len(columns), len(panels), figsize=(3.7 * len(panels), 1.8 * len(columns) + 0.8),
                             sharey="row", squeeze=False)
    for j, (param, title) in enumerate(panels):
        part = sweep[sweep["parameter"] == param].groupby("value")[list(columns)]
        mean, std = part.mean(), part.std().fillna(0.0)
        for i, col in enumerate(columns):
            ax = axes[i, j]
            ax.errorbar(mean.index, mean[col], yerr=std[col], marker="o", capsize=3, color=f"C{i}")
            ax.set_xticks(mean.index, labels=[f"{v:g}" for v in mean.index])
            if defaults is not None and param in defaults:
                ax.axvline(defaults[param], color="gray", ls=":", lw=1)
            ax.grid(alpha=0.3)
        axes[0, j].set_title(title)
        axes[-1, j].set_xlabel(param)
    for i, col in enumerate(columns):
        axes[i, 0].set_ylabel(col)
    fig.supylabel(unit)
    fig.tight_layout()
    return fig


def image_grid(images: np.ndarray, titles: Sequence[str] | None = None, ncols: int = 8) -> Figure:
    """A grid of (N, H, W, 3) uint8 images, optionally titled."""
    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (N, H, W, 3), got {images.shape}")
    n = len(images)
    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.6 * ncols, 1.8 * nrows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k < n:
            ax.imshow(images[k])
            if titles is not None:
                ax.set_title(titles[k], fontsize=7)
    fig.tight_layout()
    return fig


RELEVANCE_COLOURS = {True: "tab:green", False: "tab:red"}  # one code for relevance across the book
RELEVANCE_CODE = "Frames and text: green = a positive, red = not."  # what each gallery's caption states


def retrieval_gallery(
    queries: Sequence[str],
    ranked_images: np.ndarray,
    relevant: np.ndarray,
    scores: np.ndarray | None = None,
    width: int = 40,
    shown: np.ndarray | None = None,
) -> Figure:
    """Text-to-image results: one row per query caption, its top-K images framed in `RELEVANCE_COLOURS` (green a
    positive, red not).

    ranked_images: (Q, K, H, W, 3) uint8, best first; relevant: (Q, K) bool; scores: optional (Q, K); shown:
    optional (Q, K) bool, the tiles to draw (the others are left empty, no placeholder).
    """
    ranked_images, relevant = np.asarray(ranked_images), np.asarray(relevant, dtype=bool)
    if ranked_images.ndim != 5 or relevant.shape != ranked_images.shape[:2] or len(queries) != len(relevant):
        raise ValueError(
            f"{len(queries)} queries, images {ranked_images.shape}, relevance {relevant.shape}: "
            "expected Q queries, (Q, K, H, W, 3) images and (Q, K) relevance"
        )
    n_q, k = relevant.shape
    shown = np.ones_like(relevant) if shown is None else np.asarray(shown, dtype=bool)
    if shown.shape != relevant.shape:
        raise ValueError(f"shown {shown.shape}: expected (Q, K) = {relevant.shape}")
    fig, axes = plt.subplots(n_q, k + 1, figsize=(1.5 * k + 4.5, 1.6 * n_q), squeeze=False,
                             gridspec_kw={"width_ratios": [3.3] + [1] * k})
    for q in range(n_q):
        text_ax = axes[q, 0]
        text_ax.axis("off")
        wrapped = "\n".join(textwrap.wrap(queries[q], width))
        text_ax.text(0.0, 0.5, wrapped, fontsize=9, va="center", ha="left", transform=text_ax.transAxes)
        for j in range(k):
            ax = axes[q, j + 1]
            if not shown[q, j]:
                ax.axis("off")
                continue
            ax.imshow(ranked_images[q, j])
            ax.set_xticks([])
            ax.set_yticks([])
            h, w = ranked_images.shape[2:4]
            colour = RELEVANCE_COLOURS[bool(relevant[q, j])]
            ax.add_patch(Rectangle((-0.5, -0.5), w, h, fill=False, edgecolor=colour, linewidth=4))
            if scores is not None:
                ax.set_title(f"{scores[q, j]:.3g}", fontsize=7)
    fig.tight_layout()
    return fig


def caption_gallery(
    images: np.ndarray,
    ranked_captions: Sequence[Sequence[str]],
    relevant: np.ndarray,
    marked: np.ndarray | None = None,
    titles: Sequence[str] | None = None,
    width: int = 60,
) -> Figure:
    """Image-to-text results: one row per query image, its top-K captions beside it, green when `relevant`,
    red otherwise, "(True)" after the captions `marked` (e.g. the dataset's ground truth).

    images: (Q, H, W, 3) uint8; ranked_captions: Q lists of K captions, best first; relevant, marked: (Q, K) bool.
    """
    images, relevant = np.asarray(images), np.asarray(relevant, dtype=bool)
    n_q = len(images)
    k = relevant.shape[1] if relevant.ndim == 2 else -1
    marked = np.zeros_like(relevant) if marked is None else np.asarray(marked, dtype=bool)
    if (images.ndim != 4 or relevant.shape != (n_q, k) or marked.shape != relevant.shape
            or [len(c) for c in ranked_captions] != [k] * n_q):
        raise ValueError(f"images {images.shape}, {len(ranked_captions)} caption lists, relevance {relevant.shape}, "
                         f"marks {marked.shape}: expected (Q, H, W, 3), Q lists of K, (Q, K) and (Q, K)")
    fig, axes = plt.subplots(n_q, 2, figsize=(9, 1.9 * n_q), squeeze=False, gridspec_kw={"width_ratios": [1, 4]})
    for q in range(n_q):
        axes[q, 0].imshow(images[q])
        axes[q, 0].axis("off")
        if titles is not None:
            axes[q, 0].set_title(titles[q], fontsize=8)
        text_ax = axes[q, 1]
        text_ax.axis("off")
        for j, caption in enumerate(ranked_captions[q]):
            line = textwrap.shorten(f"{j + 1}. {caption}", width) + (" (True)" if marked[q, j] else "")
            text_ax.text(0.0, 1.0 - (j + 0.5) / k, line, fontsize=8, va="center", transform=text_ax.transAxes,
                         color=RELEVANCE_COLOURS[bool(relevant[q, j])])
    fig.tight_layout()
    return fig


def attention_heat(weights: np.ndarray, boxes: np.ndarray, image_size: int,
                   reduce: Literal["sum", "max"] = "sum") -> np.ndarray:
    """Figure 10: the heat of each pixel for each sub-embedding from the weights of the local features (grid cells
    or regions) whose box covers it: their sum (attention weights, a distribution over the features), or their
    max (per-feature scores such as match cosines, where a sum would light up where boxes overlap); 0 where no
    box covers the pixel. weights (R, K), boxes (R, 4) pixels -> (K, S, S)."""
    weights, boxes = np.asarray(weights, dtype=np.float64), np.asarray(boxes, dtype=np.float64)
    if weights.ndim != 2 or boxes.shape != (weights.shape[0], 4):
        raise ValueError(f"attention_heat: weights {weights.shape} and boxes {boxes.shape}: expected (R, K), (R, 4)")
    if reduce not in ("sum", "max"):
        raise ValueError(f"attention_heat: reduce must be 'sum' or 'max', got {reduce!r}")
    centres = np.arange(image_size) + 0.5
    inside_x = (centres[None, :] >= boxes[:, :1]) & (centres[None, :] < boxes[:, 2:3])  # (R, S)
    inside_y = (centres[None, :] >= boxes[:, 1:2]) & (centres[None, :] < boxes[:, 3:4])
    cover = inside_y[:, :, None] & inside_x[:, None, :]  # (R, S_y, S_x)
    if reduce == "sum":
        return np.einsum("rk,ryx->kyx", weights, cover.astype(np.float64))
    per_box = np.where(cover[:, None], weights[:, :, None, None], -np.inf)  # (R, K, S_y, S_x)
    heat = per_box.max(0, initial=-np.inf)  # no box at all: -inf everywhere
    return np.where(np.isfinite(heat), heat, 0.0)


def seed_interval(mean: np.ndarray, std: np.ndarray, seeds: np.ndarray,
                  confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The t interval of a mean over seeds: mean ± t(confidence, seeds - 1) · std / sqrt(seeds), elementwise
    (arrays of one shape); where seeds < 2 or std is NaN the interval is the mean itself."""
    from scipy import stats

    mean, std, seeds = (np.asarray(a, dtype=float) for a in (mean, std, seeds))
    ok = (seeds > 1) & np.isfinite(std)
    half = np.zeros_like(mean)
    half[ok] = stats.t.ppf(0.5 + confidence / 2, seeds[ok] - 1) * std[ok] / np.sqrt(seeds[ok])
    return mean - half, mean + half


def round_curves(tables: Mapping[str, pd.DataFrame], ours: str, confidence: float = 0.95,
                 ceiling: str = "Bayes ceiling") -> Figure:
    """A metric by round, one line per model: `tables` maps a metric ("R@1") to its per-round table (one row per
    model, columns `model`, `seeds`, `round<r>/<metric> (<ours>)`, `round<r>/<metric> std` and, where the paper gives
    it, `round<r>/<metric> (paper)`). Top row: ours, each model's mean over seeds with its `confidence` t interval
    (`seed_interval`, shaded), the `ceiling` row dashed in black. Bottom row: the paper's values, the same colour
    per model, markers only where it gives a value (its data are not ours: compare shapes and orderings, not
    heights). Rows with neither our values nor the paper's are left out; a model the paper gives but we do not
    build is drawn in the bottom row alone, grey."""
    metrics = list(tables)
    fig, axes = plt.subplots(2, len(metrics), figsize=(4.2 * len(metrics) + 2.2, 7.4), squeeze=False, sharex=True)
    models = list(dict.fromkeys(m for t in tables.values() for m in t["model"]))
    built = [m for m in models if m != ceiling and any(
        np.isfinite(_round_values(t[t["model"] == m], k, ours)[1]).any() for k, t in tables.items())]
    palette = [f"C{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)]  # C7, grey, is the paper-only models'
    colour = {m: palette[i % len(palette)] for i, m in enumerate(built)}
    for j, (metric, table) in enumerate(tables.items()):
        top, bottom = axes[0, j], axes[1, j]
        for _, row in table.iterrows():
            rounds, values = _round_values(row.to_frame().T, metric, ours)
            if row["model"] == ceiling:
                top.plot(rounds, values, color="black", ls="--", lw=1.5, label=ceiling)
                continue
            if row["model"] in colour:
                std = np.array([row.get(f"round{r}/{metric} std", np.nan) for r in rounds], dtype=float)
                lo, hi = seed_interval(values, std, np.full(len(rounds), row["seeds"], dtype=float), confidence)
                top.plot(rounds, values, color=colour[row["model"]], marker="o", ms=3, label=row["model"])
                top.fill_between(rounds, lo, hi, color=colour[row["model"]], alpha=0.18, lw=0)
            _, paper = _round_values(row.to_frame().T, metric, "paper")
            if np.isfinite(paper).any():
                bottom.plot(rounds, paper, color=colour.get(row["model"], "0.6"), marker="s", ms=4,
                            ls="-" if row["model"] in colour else ":", label=row["model"])
        top.set_title(f"{metric} by round: ours ({ours})", fontsize=10)
        bottom.set_title(f"{metric} by round: the paper", fontsize=10)
        for ax in (top, bottom):
            ax.set_ylabel(f"{metric} (%)")
            ax.grid(alpha=0.3)
        bottom.set_xlabel("round (queries so far)")
        bottom.set_xticks(rounds)
    axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       title=f"ours: mean over seeds,\n{confidence:.0%} t interval shaded", title_fontsize=8)
    axes[1, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       title="the paper's values\n(markers where given;\ngrey: not built here)", title_fontsize=8)
    fig.tight_layout()
    return fig


def _round_values(rows: pd.DataFrame, metric: str, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Rounds (R,) and the values (R,) of the first of `rows` in columns `round<r>/<metric> (<source>)`, rounds in
    order; NaN where a value is missing."""
    pattern = re.compile(rf"^round(\d+)/{re.escape(metric)} \({re.escape(source)}\)$")
    found = sorted((int(m.group(1)), c) for c in rows.columns if (m := pattern.match(c)))
    values = pd.to_numeric(rows.iloc[0][[c for _, c in found]], errors="coerce").to_numpy(dtype=float)
    return np.array([r for r, _ in found]), values
