"""The leaderboard page's ranking: one row per model, sorted by its share of the Bayes ceiling, with Fast
Re-ranking (FR) as columns, and a dot-and-interval chart of the share, both drawn at build time from the
committed `results/leaderboard/per_seed.csv` (one row per model, FR or not, and seed).

The interval is Student's t over the seeds (95%): mean ± t(0.975, n - 1) · sd / √n, none for one seed.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd
from scipy import stats

SHARE = "% of ceiling"
SOURCE = "leaderboard/per_seed.csv"
REQUIRED = ("base model", "FR", "seed", "protocol", "rSum", SHARE)
CONFIDENCE = 0.95


def t_interval(values: pd.Series, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high) of `values` with Student's t interval over them; low = high = NaN for one value."""
    x = values.astype(float).to_numpy()
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def ranking(per_seed: pd.DataFrame) -> pd.DataFrame:
    """One row per (base model, protocol): seeds, share of the ceiling (mean, low, high) and rSum without FR and
    with it (`FR` columns), sorted by the share without FR, highest first."""
    missing = [c for c in REQUIRED if c not in per_seed.columns]
    if missing:
        raise ValueError(f"{SOURCE}: no column {', '.join(missing)}")
    rows = []
    for (model, protocol), group in per_seed.groupby(["base model", "protocol"], sort=False, dropna=False):
        row: dict[str, object] = {"model": model, "protocol": protocol}
        for fr, suffix in ((False, ""), (True, " + FR")):
            part = group[group["FR"].astype(str).str.lower() == str(fr).lower()]
            if part.empty:
                row.update({f"seeds{suffix}": 0, f"share{suffix}": math.nan, f"low{suffix}": math.nan,
                            f"high{suffix}": math.nan, f"rSum{suffix}": math.nan})
                continue
            mean, low, high = t_interval(part[SHARE])
            row.update({f"seeds{suffix}": part["seed"].nunique(), f"share{suffix}": mean, f"low{suffix}": low,
                        f"high{suffix}": high, f"rSum{suffix}": float(part["rSum"].mean())})
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.sort_values("share", ascending=False, kind="stable").reset_index(drop=True)


def _share(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "—"
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]" if math.isfinite(low) else f"{mean:.1f}"


def chart(frame: pd.DataFrame, path: Path) -> None:
    """A dot-and-interval chart of each model's share of the ceiling (without and with FR) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{m} ({p})" for m, p in zip(frame["model"], frame["protocol"])]
    y = list(range(len(frame)))[::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(frame) + 1.2), dpi=110)
    for suffix, offset, colour, name in (("", 0.12, "#1f4e99", "without FR"), (" + FR", -0.12, "#c2570c", "with FR")):
        mean = frame[f"share{suffix}"].to_numpy(dtype=float)
        low = frame[f"low{suffix}"].to_numpy(dtype=float)
        high = frame[f"high{suffix}"].to_numpy(dtype=float)
        ys = [v + offset for v in y]
        ax.hlines(ys, low, high, color=colour, linewidth=1.6)
        ax.plot(mean, ys, "o", color=colour, markersize=4.5, label=f"{name} (mean, 95% t interval over seeds)")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("instance rSum as % of the Bayes ceiling (scenes test split)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def leaderboard_html(results: Path, figure: Path, figure_url: str) -> str | None:
    """The ranking table and chart (written to `figure`, shown from `figure_url`) from `results`' committed
    `leaderboard/per_seed.csv`; None when there is none."""
    source = results / SOURCE
    if not source.is_file():
        return None
    frame = ranking(pd.read_csv(source))
    chart(frame, figure)
    head = ("<tr><th>#</th><th>model</th><th>protocol</th><th>seeds</th><th>% of ceiling [95% interval]</th>"
            "<th>+ FR: % of ceiling</th><th>rSum</th><th>+ FR: rSum</th></tr>")
    body = []
    for i, r in frame.iterrows():
        cells = [str(i + 1), html.escape(str(r["model"])), html.escape(str(r["protocol"])), str(r["seeds"]),
                 _share(r["share"], r["low"], r["high"]), _share(r["share + FR"], r["low + FR"], r["high + FR"]),
                 f"{r['rSum']:.1f}" if math.isfinite(r["rSum"]) else "—",
                 f"{r['rSum + FR']:.1f}" if math.isfinite(r["rSum + FR"]) else "—"]
        body.append("<tr>" + "".join(f'<td class="{"xmr-label" if j in (1, 2) else "xmr-num"}">{c}</td>'
                                     for j, c in enumerate(cells)) + "</tr>")
    caption = (f"Each model's instance rSum as a share of the Bayes ceiling on the scenes test split, mean over its"
               f" seeds with a 95% Student's t interval, without and with Fast Re-ranking (FR), sorted by the share"
               f" without FR. Drawn when the book was built from the committed <code>results/{SOURCE}</code>.")
    alt = ("Dot-and-interval chart: each model's share of the Bayes ceiling without and with FR, with 95% intervals"
           f" over seeds, drawn from results/{SOURCE}.")
    return "\n".join([
        '<div class="xmr-leaderboard">',
        '<p class="xmr-findings-title">The leaderboard: every model by its share of the ceiling</p>',
        f'<p class="xmr-caption">{caption}</p>',
        f'<table class="table xmr-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>',
        (f'<figure class="xmr-figure"><img src="{figure_url}" alt="{html.escape(alt, quote=True)}">'
         f"<figcaption>{caption}</figcaption></figure>"),
        "</div>",
    ])
