"""Split -> embeddings -> score matrix -> every metric under every relevance view, as one flat dict.

    embed_split(model, split, vocab)          -> (image embeddings, caption embeddings)
    score_matrix(model, img_emb, cap_emb)     -> scores (N, M) of one direction, filled by blocks of image
                                                 rows (and, with `caption_chunk`, caption columns)
    direction_scores(model, img_emb, cap_emb) -> (scores_i2t, scores_t2i), both (N, M), re-ranked if asked
    rerank_directions(scores_i2t, scores_t2i, rerank) -> the same scores re-ranked (image and caption queries)
    evaluate_scores(split, scores_i2t, ...)   -> {"instance/i2t/R@1": ..., "exact/t2i/mAP@R": ..., "rsum": ...}
    evaluate_model(model, split, vocab, ...)  -> embed, score both directions (+ re-ranking), evaluate
    evaluate_similarities(model, split, vocab, methods) -> {method: evaluate_scores under that similarity}
    results_frame(results)                    -> tidy DataFrame: view, direction, level, metric, value
    multi_query_scores(model, split, vocab, rounds) -> scores (T, Q, G) of each image's first r region
                                                 queries (r = 1..T) against every image
    gallery_ranks(scores (G, n))              -> each column's pessimistic 1-based ranks of the rows
    evaluate_multi_query(model, split, vocab, rounds) -> `metrics.multi_round` of those, plus "rsum"
    multi_round_metrics(scores)  -> the same from scores already computed (e.g. an ensemble's sum)

Model contract (`xmr_core.methods.base`): `model.encode_images(batch) -> emb`, `model.encode_captions(batch)
-> emb` and `model.score_direction(img_emb, cap_emb, direction, **options) -> Tensor (n_img, n_cap)` (higher
= more similar; a model without it is scored by `model.score(img_emb, cap_emb, **options)` in both
directions), where `emb` is a tensor `(n, ...)` or a tuple of tensors (e.g. a Gaussian `(mu, logvar)`), all
sliced along dim 0. Batches are the dicts of `xmr_core.data.datasets` (`image_loader` / `caption_loader`, in
split order). Scores of both directions keep the (N images, M captions) layout: image→text ranks each row of
`scores_i2t`, text→image each column of `scores_t2i`. A re-ranker (`rerank`, e.g. DVSE's Fast Re-ranking)
maps a (queries, gallery) matrix and its direction to a matrix of the same shape, applied to each
direction's queries (e.g. `similarity.FastReranker`).

Keys (metric values in percent, ranks 1-based; definitions and the tie rule in `xmr_core.metrics`):
- `{view}/{direction}/{metric}` for each view of `split.views()` (instance, class, exact) and direction
  (i2t, t2i): R@K, medR, meanR, R-P, mAP@R (and P@K if asked for);
- plausible view (PCME's PMRP, concept labels within L1 distance ζ): `plausible/{direction}/{metric}_zeta{ζ}`
  for every metric and ζ, plus `plausible/{direction}/PMRP`, the mean of `R-P_zeta{ζ}` over ζ;
- `rsum`: instance-view i2t + t2i R@1 + R@5 + R@10;
- when `split.caption_level` is set, text→image per caption level for the non-plausible views:
  `{view}/t2i@{level}/{metric}` (queries = the captions of that level, gallery = all images).
Multi-query retrieval (Drill-down / HMRN; `Split.queries`): query set q is image q's region queries, its only
positive image q, the gallery every image of the split. Round r scores the set of its first r queries in
stored order. A multi-query model (`task == "multi_query"`) scores the sets themselves (`encode_queries`,
`query_prefix`, `score`); any other model is a single-query baseline, the paper's "*" rows: each query is
encoded as a caption and scored text→image alone, and round r's score is the mean of the scores of the first r
queries (`fusion="scores"`, the paper's re-implemented ITR rows), or minus the mean of their ranks of the
image (`fusion="ranks"`, Drill-down's R-RankFusion; a query's rank of an image is pessimistic: the images
scoring at least as high, itself included). A set with fewer than `rounds` queries is an error (`short="error"`) or keeps its
whole set in the later rounds (`short="hold"`); no query is ever dropped.

Protocols: `full` (the whole split), `coco5k` (the same, on a 5,000 × 25,000 test split), `coco1k`
(every metric on each of five folds of 1,000 images and their captions in stored order, then averaged:
`metrics.image_folds`, so an image with 6 or 7 captions keeps them in its fold).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm

from xmr_core import metrics
from xmr_core.data.corpus import Split

Protocol = Literal["full", "coco1k", "coco5k"]
Embedding = Tensor | tuple[Tensor, ...]
PROTOCOLS: tuple[str, ...] = ("full", "coco1k", "coco5k")
DIRECTIONS: tuple[str, ...] = ("i2t", "t2i")
SCORE_CHUNK = 256  # image rows scored per `model.score` call
QUERY_CHUNK = 64  # multi-query scoring: images × query sets per `model.score` call, each way
Short = Literal["error", "hold"]
Fusion = Literal["scores", "ranks"]
Reranker = Callable[[Tensor, str], Tensor]  # ((queries, gallery) scores, direction) -> the same shape


# ------------------------------------------------------------------------------------------- embeddings


def _to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v for k, v in batch.items()}


def _cat(parts: list[Embedding]) -> Embedding:
    if isinstance(parts[0], tuple):
        return tuple(torch.cat([p[i] for p in parts]) for i in range(len(parts[0])))
    return torch.cat(parts)


def _rows(emb: Embedding, rows: slice) -> Embedding:
    return tuple(e[rows] for e in emb) if isinstance(emb, tuple) else emb[rows]


def _n_rows(emb: Embedding) -> int:
    return len(emb[0]) if isinstance(emb, tuple) else len(emb)


def _encode_all(
    encode: Any,
    batches: Iterable[Mapping[str, Any]],
    index_key: str,
    n: int,
    what: str,
    device: torch.device,
    progress: bool,
) -> Embedding:
    """Encode every batch; check that the batches cover items 0..n-1 in split order, none dropped."""
    parts, seen = [], []
    for batch in tqdm(batches, desc=f"embed {what}", disable=not progress):
        parts.append(encode(_to_device(batch, device)))
        seen.append(torch.as_tensor(batch[index_key]).cpu())
    order = torch.cat(seen) if seen else torch.empty(0, dtype=torch.long)
    if not torch.equal(order, torch.arange(n)):
        raise ValueError(
            f"the {what} loader yielded {len(order)} items ({index_key} "
            f"{order[:5].tolist()}...), expected all {n} in split order"
        )
    emb = _cat(parts)
    if _n_rows(emb) != n:
        raise ValueError(f"encoding {n} {what} gave {_n_rows(emb)} embeddings")
    return emb


def _model_device(model: Any, device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return first.device if first is not None else torch.device("cpu")


@torch.no_grad()
def embed_split(
    model: Any,
    split: Split,
    vocab: Any = None,
    *,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    progress: bool = False,
    loaders: tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]] | None = None,
) -> tuple[Embedding, Embedding]:
    """Embed every image and caption of `split` in split order, the model in eval mode (restored after).

    `loaders`: (image batches, caption batches); by default `datasets.image_loader(split, batch_size)` and
    `datasets.caption_loader(split, vocab, batch_size)`. `device`: where batches go (default: the model's).
    Returns `(img_emb, cap_emb)`: tensors `(N, ...)` / `(M, ...)` or tuples of them.
    """
    if loaders is None:
        from xmr_core.data.datasets import caption_loader, image_loader

        if vocab is None:
            raise ValueError("embed_split needs the vocabulary to tokenise captions (or pass loaders=...)")
        visual = getattr(model, "visual", "auto")
        loaders = (image_loader(split, batch_size, visual=visual), caption_loader(split, vocab, batch_size))
    dev = _model_device(model, device)
    with _evaluating(model):
        img = _encode_all(
            model.encode_images, loaders[0], "image_index", split.n_images, "images", dev, progress
        )
        cap = _encode_all(
            model.encode_captions, loaders[1], "caption_index", split.n_captions, "captions", dev, progress
        )
    return img, cap


@contextlib.contextmanager
def _evaluating(model: Any) -> Iterator[None]:
    """The model in eval mode inside the block, its mode restored after."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def _score_fn(model: Any, direction: str) -> Callable[..., Tensor]:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if hasattr(model, "score_direction"):
        return lambda img, cap, **options: model.score_direction(img, cap, direction, **options)
    return model.score


@torch.no_grad()
def score_matrix(
    model: Any,
    img_emb: Embedding,
    cap_emb: Embedding,
    *,
    direction: str = "i2t",
    chunk_size: int = SCORE_CHUNK,
    caption_chunk: int | None = None,
    progress: bool = False,
    **score_kwargs: Any,
) -> Tensor:
    """Scores `(N, M)` of `direction` from `model.score_direction(img_emb[i:j], cap_emb[k:l], direction,
    **score_kwargs)`, in blocks of `chunk_size` image rows × `caption_chunk` caption columns (None: all
    captions at once, e.g. for a cross-attention scorer that needs both axes bounded) (`score_kwargs`: e.g.
    PCME's `method`, a test-time similarity other than the model's default)."""
    n, m = _n_rows(img_emb), _n_rows(cap_emb)
    score = _score_fn(model, direction)
    col_step = m if caption_chunk is None else caption_chunk
    if chunk_size < 1 or col_step < 1:
        raise ValueError(f"score_matrix: chunk sizes must be >= 1, got {chunk_size} and {caption_chunk}")
    out = None
    for start in tqdm(range(0, n, chunk_size), desc="score", disable=not progress):
        rows = slice(start, min(start + chunk_size, n))
        for col in range(0, m, col_step):
            cols = slice(col, min(col + col_step, m))
            block = score(_rows(img_emb, rows), _rows(cap_emb, cols) if caption_chunk else cap_emb,
                          **score_kwargs)
            shape = (rows.stop - rows.start, cols.stop - cols.start)
            if tuple(block.shape) != shape:
                raise ValueError(f"model.score gave shape {tuple(block.shape)} for {shape[0]} images × {shape[1]} "
                                 "captions")
            if out is None:
                out = torch.empty((n, m), dtype=block.dtype, device=block.device)
            out[rows, cols] = block
    if out is None:
        raise ValueError(f"score_matrix: nothing to score ({n} images × {m} captions)")
    return out


@torch.no_grad()
def direction_scores(
    model: Any,
    img_emb: Embedding,
    cap_emb: Embedding,
    *,
    rerank: Reranker | None = None,
    progress: bool = False,
    **score_kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """(scores_i2t, scores_t2i), both `(N, M)`: scored once when the model is not `directional`, else once
    per direction; `rerank` (queries, gallery) -> same shape is applied to the image queries of i2t and to
    the caption queries of t2i, with the direction (`rerank(scores, "i2t")`, `rerank(scores, "t2i")`)."""
    i2t = score_matrix(model, img_emb, cap_emb, direction="i2t", progress=progress, **score_kwargs)
    t2i = i2t
    if getattr(model, "directional", False):
        t2i = score_matrix(model, img_emb, cap_emb, direction="t2i", progress=progress, **score_kwargs)
    return (i2t, t2i) if rerank is None else rerank_directions(i2t, t2i, rerank)


def rerank_directions(scores_i2t: Tensor, scores_t2i: Tensor, rerank: Reranker) -> tuple[Tensor, Tensor]:
    """Re-rank finished scores (`direction_scores`' layout, both (N, M)): the image queries of `scores_i2t`
    (its rows) and the caption queries of `scores_t2i` (its columns) -> the same layout."""
    return rerank(scores_i2t, "i2t"), rerank(scores_t2i.T, "t2i").T


# ----------------------------------------------------------------------------------------- evaluation


def _relevances(
    split: Split, view: str, t2i: np.ndarray | None, zetas: Sequence[int], images: slice, captions: slice
) -> dict[str, dict[str, metrics.Relevance]]:
    """{direction: {name: relevance}} of one view on a block of images × captions (names: view, or
    `plausible/zeta{ζ}`); `t2i` is the split's `(M, N)` relevance of a non-plausible view."""
    if view == "plausible":
        labels = np.asarray(split.image_labels)
        img_lab = labels[images]
        cap_lab = labels[np.asarray(split.caption_image)[captions]]
        return {
            "i2t": {f"plausible/zeta{z}": metrics.LabelRelevance(img_lab, cap_lab, z) for z in zetas},
            "t2i": {f"plausible/zeta{z}": metrics.LabelRelevance(cap_lab, img_lab, z) for z in zetas},
        }
    block = t2i[captions, images]
    return {"i2t": {view: block.T}, "t2i": {view: block}}


def _evaluate_block(
    split: Split,
    scores_i2t: Tensor,
    scores_t2i: Tensor,
    t2i: Mapping[str, np.ndarray | None],
    images: slice,
    captions: slice,
    ks: Sequence[int],
    zetas: Sequence[int],
    precision_ks: Sequence[int],
    chunk_rows: int | None,
    progress: bool,
) -> dict[str, float]:
    views = list(t2i)
    rels = {view: _relevances(split, view, t2i[view], zetas, images, captions) for view in views}
    levels = None if split.caption_level is None else np.asarray(split.caption_level)[captions]
    out: dict[str, float] = {}
    for direction in DIRECTIONS:
        scores = scores_i2t if direction == "i2t" else scores_t2i.T
        named = {name: rel for view in views for name, rel in rels[view][direction].items()}
        stats = metrics.ranking_stats(
            scores, named, precision_ks=precision_ks, chunk_rows=chunk_rows, progress=progress
        )
        for name, st in stats.items():
            view, _, zeta = name.partition("/")
            suffix = f"_{zeta}" if zeta else ""
            out.update({f"{view}/{direction}/{k}{suffix}": v for k, v in st.summary(ks).items()})
            if direction == "t2i" and levels is not None and view != "plausible":
                for level in dict.fromkeys(levels):  # levels in order of first appearance
                    out.update(
                        {
                            f"{view}/t2i@{level}/{k}": v
                            for k, v in st.summary(ks, mask=levels == level).items()
                        }
                    )
        if "plausible" in views:
            out[f"plausible/{direction}/PMRP"] = float(
                np.mean([out[f"plausible/{direction}/R-P_zeta{z}"] for z in zetas])
            )
    if "instance" in views:
        out["rsum"] = metrics.rsum(out, prefix="instance/")
    return out


def evaluate_scores(
    split: Split,
    scores_i2t: Tensor | np.ndarray,
    views: Sequence[str] | None = None,
    protocol: Protocol = "full",
    ks: Sequence[int] = metrics.RSUM_KS,
    *,
    zetas: Sequence[int] = metrics.DEFAULT_ZETAS,
    precision_ks: Sequence[int] = (),
    chunk_rows: int | None = None,
    progress: bool = False,
    scores_t2i: Tensor | np.ndarray | None = None,
) -> dict[str, float]:
    """Every metric under every view (default: `split.views()`), both directions, as one flat dict.

    `scores_i2t`: `(N, M)` image→caption scores of the split, higher = more similar; `scores_t2i`: the
    `(N, M)` scores text→image queries are ranked by (default: the same matrix). R@1/5/10 are always
    included (rSum needs them). See the module docstring for the keys and the protocols.
    """
    s = torch.as_tensor(scores_i2t)
    s_t2i = s if scores_t2i is None else torch.as_tensor(scores_t2i)
    for name, mat in (("scores", s), ("scores_t2i", s_t2i)):
        if tuple(mat.shape) != (split.n_images, split.n_captions):
            raise ValueError(
                f"{split.source}: split {split.name!r}: {name} have shape {tuple(mat.shape)}, expected "
                f"({split.n_images}, {split.n_captions}) images × captions"
            )
    views = list(split.views() if views is None else views)
    missing = [v for v in views if v not in split.views()]
    if missing:
        raise ValueError(
            f"{split.source}: split {split.name!r} has no {missing} relevance (has {split.views()})"
        )
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    if protocol == "coco5k" and tuple(s.shape) != (5000, 25000):
        raise ValueError(f"{split.source}: COCO 5K needs 5000 images × 25000 captions, got {tuple(s.shape)}")
    all_ks = tuple(sorted(set(ks) | set(metrics.RSUM_KS)))
    full = [(slice(0, split.n_images), slice(0, split.n_captions))]
    try:
        blocks = metrics.image_folds(split.caption_image, split.n_images) if protocol == "coco1k" else full
    except ValueError as err:
        raise ValueError(f"{split.source}: split {split.name!r}: the COCO 1K protocol: {err}") from None
    # plausible relevance is built from the labels chunk by chunk: its (M, N) matrix is never needed
    t2i = {view: None if view == "plausible" else split.relevance(view, "t2i") for view in views}
    results = []
    for f, (images, captions) in enumerate(blocks):
        try:
            results.append(
                _evaluate_block(
                    split,
                    s[images, captions],
                    s_t2i[images, captions],
                    t2i,
                    images,
                    captions,
                    all_ks,
                    zetas,
                    precision_ks,
                    chunk_rows,
                    progress,
                )
            )
        except ValueError as err:
            where = f"COCO 1K fold {f}: " if protocol == "coco1k" else ""
            raise ValueError(f"{split.source}: split {split.name!r}: {where}{err}") from None
    return metrics.average_folds(results)


def evaluate_model(
    model: Any,
    split: Split,
    vocab: Any = None,
    *,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    protocol: Protocol = "full",
    views: Sequence[str] | None = None,
    ks: Sequence[int] = metrics.RSUM_KS,
    zetas: Sequence[int] = metrics.DEFAULT_ZETAS,
    precision_ks: Sequence[int] = (),
    progress: bool = False,
    loaders: tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]] | None = None,
    rerank: Reranker | None = None,
    **score_kwargs: Any,
) -> dict[str, float]:
    """`embed_split` -> `direction_scores` (with `rerank`, `score_kwargs`) -> `evaluate_scores`."""
    img, cap = embed_split(
        model, split, vocab, batch_size=batch_size, device=device, progress=progress, loaders=loaders
    )
    i2t, t2i = direction_scores(model, img, cap, rerank=rerank, progress=progress, **score_kwargs)
    return evaluate_scores(
        split, i2t, views, protocol, ks, zetas=zetas, precision_ks=precision_ks, progress=progress,
        scores_t2i=t2i,
    )


def results_frame(results: Mapping[str, float]) -> pd.DataFrame:
    """Tidy table of `evaluate_scores` results: columns view, direction, level ("all" unless per caption
    level), metric, value; `rsum` becomes view instance, direction both."""
    rows = []
    for key, value in results.items():
        if key == "rsum":
            rows.append(("instance", "both", "all", "rsum", value))
            continue
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"result key {key!r} is not view/direction/metric")
        view, direction, metric = parts
        direction, _, level = direction.partition("@")
        rows.append((view, direction, level or "all", metric, float(value)))
    return pd.DataFrame(rows, columns=["view", "direction", "level", "metric", "value"])


def evaluate_similarities(
    model: Any,
    split: Split,
    vocab: Any,
    methods: Sequence[str],
    *,
    views: Sequence[str] | None = None,
    device: str | torch.device | None = None,
    protocol: Protocol = "full",
    loaders: tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]] | None = None,
) -> dict[str, dict[str, float]]:
    """Embed `split` once (`embed_split`), then `evaluate_scores` for each test-time similarity in
    `methods`, scored with `model.score(..., method=m)` (the model and its config are left as they are).
    Returns {method: {metric key: value}}."""
    img, cap = embed_split(model, split, vocab, device=device, loaders=loaders)
    out = {}
    for m in methods:
        i2t, t2i = direction_scores(model, img, cap, method=m)
        out[m] = evaluate_scores(split, i2t, views=views, protocol=protocol, scores_t2i=t2i)
    return out


# ---------------------------------------------------------------------------------------- multi-query


def _check_rounds(model: Any, split: Split, rounds: int, short: Short) -> np.ndarray:
    """(N,) int64 region queries per image, after checking `rounds` against the split and the model."""
    if split.queries is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no region queries")
    if short not in ("error", "hold"):
        raise ValueError(f"short must be 'error' or 'hold', got {short!r}")
    limit = getattr(model, "max_queries", None)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if limit is not None and rounds > limit:
        raise ValueError(f"{rounds} rounds: {getattr(model, 'name', 'the model')} scores sets of at most "
                         f"max_queries={limit} queries")
    counts = np.array([len(q) for q in split.queries], dtype=np.int64)
    if short == "error" and (counts < rounds).any():
        i = int(np.flatnonzero(counts < rounds)[0])
        raise ValueError(f"{split.source}: image {split.image_ids[i]!r} has {counts[i]} region queries, fewer than "
                         f"{rounds} rounds (short='hold' scores its whole set in the later rounds)")
    return counts


def _map(emb: Embedding, fn: Callable[[Tensor], Tensor]) -> Embedding:
    return tuple(fn(e) for e in emb) if isinstance(emb, tuple) else fn(emb)


def _single_query_sets(model: Any) -> Callable[[Mapping[str, Any]], Embedding]:
    """Encoder of a `query_loader` batch for a single-query model: each real query as a caption
    (`encode_captions`), laid out as sets (B, T, ...) with zeros where a set has no query."""

    def encode(batch: Mapping[str, Any]) -> Embedding:
        mask = batch["query_mask"]
        emb = model.encode_captions({"tokens": batch["query_tokens"][mask], "lengths": batch["query_lengths"][mask]})
        return _map(emb, lambda e: e.new_zeros(mask.shape + e.shape[1:]).index_put_((mask,), e))

    return encode


def gallery_ranks(scores: Tensor) -> Tensor:
    """(G, n) scores -> (G, n): in each column, the pessimistic 1-based rank of every row (the rows scoring at
    least as high, itself included), as a float of the scores' dtype."""
    columns = scores.T.contiguous()
    below = torch.searchsorted(columns.sort(1).values, columns, side="left")  # rows scoring lower
    return (scores.shape[0] - below).T.to(scores.dtype)


@torch.no_grad()
def multi_query_scores(
    model: Any,
    split: Split,
    vocab: Any,
    rounds: int,
    *,
    short: Short = "error",
    fusion: Fusion = "scores",
    batch_size: int = 128,
    chunk_size: int = QUERY_CHUNK,
    query_chunk: int = QUERY_CHUNK,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Tensor:
    """Scores `(rounds, Q, G)`: after round r, query set q (image q's first r region queries; Q = G = the
    split's images) against every image, scored in blocks of `chunk_size` images × `query_chunk` sets (see the
    module docstring for single-query models, `fusion` and `short`). The result is held whole: rounds · N² scores
    (Drill-down's 10 rounds on 9,896 test images: 3.9 GB in float32)."""
    from xmr_core.data.datasets import image_loader, query_loader

    counts = _check_rounds(model, split, rounds, short)
    n, dev = split.n_images, _model_device(model, device)
    multi = getattr(model, "task", "pairs") == "multi_query"
    if fusion not in ("scores", "ranks") or (multi and fusion != "scores"):
        raise ValueError(f"fusion must be 'scores' or, for a single-query model, 'ranks'; got {fusion!r}")
    blocks = {"direction": "t2i", "chunk_size": chunk_size, "caption_chunk": query_chunk, "progress": progress}
    with _evaluating(model):
        img = _encode_all(model.encode_images, image_loader(split, batch_size, visual=model.visual), "image_index",
                          n, "images", dev, progress)
        queries = query_loader(split, vocab, batch_size, visual=None, max_queries=rounds)
        sets = _encode_all(model.encode_queries if multi else _single_query_sets(model), queries, "image_index", n,
                           "query sets", dev, progress)
        if multi:
            return torch.stack([score_matrix(model, img, model.query_prefix(sets, r), **blocks).T
                                for r in range(1, rounds + 1)])
        # single-query baseline: every query scored alone, then the mean over each set's first r queries
        held = torch.as_tensor(np.minimum(counts, rounds))  # (Q,) queries of each set in the last round
        mask = torch.arange(rounds)[None, :] < held[:, None]  # (Q, rounds)
        alone = score_matrix(model, img, _map(sets, lambda e: e[mask.to(e.device)]), **blocks)  # (G, n_queries)
        if fusion == "ranks":
            alone = -gallery_ranks(alone)
        padded = alone.new_zeros(n, *mask.shape)
        padded[:, mask.to(alone.device)] = alone
        running = padded.cumsum(-1)  # (G, Q, rounds): the sums of the first r scores
        per_round = []
        for r in range(1, rounds + 1):
            n_r = held.clamp(max=r).to(alone.device)  # (Q,) queries scored after round r
            per_round.append((running[:, torch.arange(n, device=alone.device), n_r - 1] / n_r).T)
        return torch.stack(per_round)


def evaluate_multi_query(
    model: Any,
    split: Split,
    vocab: Any,
    rounds: int,
    *,
    ks: Sequence[int] = metrics.RSUM_KS,
    short: Short = "error",
    fusion: Fusion = "scores",
    batch_size: int = 128,
    chunk_size: int = QUERY_CHUNK,
    query_chunk: int = QUERY_CHUNK,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """`multi_query_scores` -> `metrics.multi_round` (keys `round{r}/R@K`, `round{r}/medR`, `round{r}/meanR`,
    `mean/...`, R@1/5/10 always included) plus "rsum": mean R@1 + R@5 + R@10 over the rounds (Avg. R@Sum)."""
    scores = multi_query_scores(model, split, vocab, rounds, short=short, fusion=fusion, batch_size=batch_size,
                                chunk_size=chunk_size, query_chunk=query_chunk, device=device, progress=progress)
    return multi_round_metrics(scores, ks)


def multi_round_metrics(scores: Tensor, ks: Sequence[int] = metrics.RSUM_KS) -> dict[str, float]:
    """`metrics.multi_round` of `multi_query_scores`' (T, Q, G) scores, set q's target being image q (R@1/5/10
    always included), plus "rsum": mean R@1 + R@5 + R@10 over the rounds (Avg. R@Sum)."""
    all_ks = tuple(sorted(set(ks) | set(metrics.RSUM_KS)))
    out = metrics.multi_round(scores, np.arange(scores.shape[1]), all_ks)
    out["rsum"] = sum(out[f"mean/R@{k}"] for k in metrics.RSUM_KS)
    return out


# ------------------------------------------------------------------------------- rows, lists and per-query hits
RK_COLUMNS = [f"{d} R@{k}" for d in DIRECTIONS for k in metrics.RSUM_KS]  # "i2t R@1", ..., "t2i R@10"


def coco1k_missing(split: Split) -> str:
    """Why the COCO 1K protocol does not apply to `split` ('' when it does): its images do not split into five equal
    folds (real CUB's 2,933 test images; COCO's 5,000 and the scenes' splits do)."""
    if split.n_images % 5 == 0:
        return ""
    return f"{split.n_images} {split.name} images do not split into five equal folds: no COCO 1K protocol"


def instance_row(split: Split, scores_i2t: Tensor, scores_t2i: Tensor) -> dict[str, float]:
    """Instance R@1/5/10 per direction and rSum on `split` under the 1K protocol (five folds; NaN where it does not
    apply, `coco1k_missing`) and on the whole split ("all"): {"1K i2t R@1", ..., "1K rSum", "all i2t R@1", ...,
    "all rSum"}. Scores (N, M) both."""
    whole = dataclasses.replace(split, caption_level=None)  # no per-level breakdown (a fold may lack a level)
    out = {f"1K {c}": math.nan for c in [*RK_COLUMNS, "rSum"]}
    for proto, protocol in (("1K", "coco1k"), ("all", "full")) if not coco1k_missing(split) else (("all", "full"),):
        values = evaluate_scores(whole, scores_i2t, views=["instance"], protocol=protocol, scores_t2i=scores_t2i)
        out.update({f"{proto} {c}": values[f"instance/{c.replace(' ', '/')}"] for c in RK_COLUMNS})
        out[f"{proto} rSum"] = values["rsum"]
    return out


def label_distance(labels: np.ndarray, query_image: int, images: np.ndarray) -> np.ndarray:
    """zeta of Figure 3: the L1 distance between the concept-label vector of `query_image` and that of each of
    `images` ((N, C) 0/1 labels) -> (len(images),) int."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.abs(labels[np.asarray(images)] - labels[query_image][None, :]).sum(1)


def top_k_lists(scores_i2t: Tensor, scores_t2i: Tensor, split: Split, image_queries: Sequence[int],
                caption_queries: Sequence[int], k: int = 6) -> pd.DataFrame:
    """Figure 3's lists: for each image query its top-k captions (by `scores_i2t` rows) and for each caption
    query its top-k images (by `scores_t2i` columns), with each result's zeta to the query's image and whether
    it is an instance positive. Columns: direction, query, rank, result, zeta (NaN where the split has no concept
    labels: real data other than COCO), instance."""
    rows = []
    cap_img = np.asarray(split.caption_image)

    def zetas(query_image: int, images: np.ndarray) -> list[float]:
        if split.image_labels is None:
            return [math.nan] * len(images)
        return [int(z) for z in label_distance(split.image_labels, query_image, images)]

    for q in image_queries:
        top = torch.topk(torch.as_tensor(scores_i2t)[q], k).indices.numpy()
        rows += [{"direction": "i2t", "query": int(q), "rank": r + 1, "result": int(c), "zeta": z,
                  "instance": bool(cap_img[c] == q)} for r, (c, z) in enumerate(zip(top, zetas(q, cap_img[top])))]
    for q in caption_queries:
        top = torch.topk(torch.as_tensor(scores_t2i)[:, q], k).indices.numpy()
        rows += [{"direction": "t2i", "query": int(q), "rank": r + 1, "result": int(i), "zeta": z,
                  "instance": bool(i == cap_img[q])} for r, (i, z) in enumerate(zip(top, zetas(int(cap_img[q]), top)))]
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SplitScores:
    """One model's test scores in `direction_scores`' layout (i2t, t2i), each (N images, M captions), on the
    CPU, and the seconds that embedding and scoring the split took."""

    i2t: Tensor
    t2i: Tensor
    seconds: float


def score_split(model: Any, split: Split, vocab: Any, device: torch.device | str,
                **score_options: object) -> SplitScores:
    """Embed and score the whole split with the model's own test-time score, timed (Figure 5's retrieval time:
    both sides encoded, every image x caption scored)."""
    model.to(device).eval()
    t0 = time.perf_counter()
    img, cap = embed_split(model, split, vocab, device=device)
    i2t, t2i = (s.cpu() for s in direction_scores(model, img, cap, **score_options))  # on the CPU: waits for a GPU
    return SplitScores(i2t, t2i, time.perf_counter() - t0)


def query_hits(split: Split, scores: SplitScores) -> np.ndarray:
    """(N + M, 3) 100 · [best rank <= K] for K = 1, 5, 10 of every query of the whole split under instance
    relevance (`metrics.ranking_stats`, pessimistic ties): the N image queries (i2t), then the M caption queries
    (t2i). Each direction's column mean is its R@K of `metric_row`'s "all" columns."""
    parts = []
    for d, q_scores in (("i2t", scores.i2t), ("t2i", scores.t2i.T)):
        best = metrics.ranking_stats(q_scores, {"instance": split.relevance("instance", d)})["instance"].best_rank
        parts.append(100.0 * (best.double().numpy()[:, None] <= np.asarray(metrics.RSUM_KS)[None, :]))
    return np.concatenate(parts)


def query_strata(split: Split) -> np.ndarray:
    """(N + M,) the stratum of each query of `query_hits`: 0 the images, 1 the captions."""
    return np.repeat([0, 1], [split.n_images, split.n_captions])


def rsum_per_query(hits: np.ndarray) -> np.ndarray:
    """(Q,) each query's share of rSum: 2 · its hits at 1, 5, 10, so that the mean of the two strata's means is
    rSum (the sum of R@1, 5, 10 over both directions)."""
    return 2.0 * hits.sum(1)


def r15_per_query(hits: np.ndarray) -> np.ndarray:
    """(Q,) the mean of each query's hits at 1 and 5: the mean of its two strata's means is Table 3's mean of
    R@1 and R@5 both ways."""
    return hits[:, :2].mean(1)
