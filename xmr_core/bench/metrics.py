"""`python -m xmr_core.bench metrics`: every metric of `xmr_core.metrics`, both directions, at COCO 5K size.

Random image→text scores (5,000 × 25,000 by default), instance relevance (5 captions per image) and
80-dim multi-hot concept labels (1–4 concepts an image, like COCO's instance categories) for PMRP.
Prints wall time and peak memory (RSS, and CUDA peak on a GPU), then times torchmetrics'
`RetrievalHitRate` (K = 1, 5, 10) and `RetrievalRPrecision` on a slice of the queries, extrapolates its
per-query time to all queries, and compares it with this module on the same work (instance R@K and R-P,
both directions). Last line: `key=value` pairs.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import torch

from xmr_core import metrics
from xmr_core.config import select_device


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def _inputs(
    n_images: int, per_image: int, n_concepts: int, seed: int, device: torch.device
) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
    """Scores `(N, 5N)`, caption→image index `(5N,)`, instance relevance `(N, 5N)`, labels `(N, C)`."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(n_images, n_images * per_image, generator=gen).to(device)
    caption_image = np.repeat(np.arange(n_images), per_image)
    relevance = caption_image[None, :] == np.arange(n_images)[:, None]
    rng = np.random.default_rng(seed)
    labels = np.zeros((n_images, n_concepts), dtype=np.uint8)
    for i, k in enumerate(rng.integers(1, 5, n_images)):
        labels[i, rng.choice(n_concepts, k, replace=False)] = 1
    return scores, caption_image, relevance, labels


def _ours(
    scores: torch.Tensor, caption_image: np.ndarray, relevance: np.ndarray, labels: np.ndarray, progress: bool
) -> tuple[dict[str, float], dict[str, float], float]:
    """Every metric, both directions; returns (metrics, wall seconds per part and in all, CPU seconds)."""
    caption_labels = labels[caption_image]
    parts = {
        "5k": lambda: metrics.bidirectional(scores, relevance, progress=progress),
        "1k": lambda: metrics.coco_1k(scores, relevance),
        "i2t": lambda: metrics.pmrp(scores, labels, caption_labels, progress=progress),
        "t2i": lambda: metrics.pmrp(scores.T, caption_labels, labels, progress=progress),
    }
    out, seconds = {}, {}
    start, cpu_start = time.perf_counter(), time.process_time()
    for name, run in parts.items():
        part_start = time.perf_counter()
        out.update({f"{name}/{k}": v for k, v in run().items()})
        if scores.is_cuda:
            torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - part_start
    seconds["all"] = time.perf_counter() - start
    return out, seconds, time.process_time() - cpu_start


def _torchmetrics_per_query(scores: torch.Tensor, relevance: np.ndarray, n_queries: int) -> float:
    """Seconds per query for torchmetrics' hit rate @1/5/10 and R-Precision on the first `n_queries` rows."""
    from torchmetrics.retrieval import RetrievalHitRate, RetrievalRPrecision

    def run(n: int) -> None:
        s = scores[:n].cpu()
        target = torch.as_tensor(relevance[:n])
        indexes = torch.arange(n)[:, None].expand_as(s)
        for metric in [RetrievalHitRate(top_k=k) for k in metrics.RSUM_KS] + [RetrievalRPrecision()]:
            metric.update(s.flatten(), target.flatten(), indexes=indexes.flatten())
            metric.compute()

    run(2)  # warm-up: first-call costs are not per-query costs
    start = time.perf_counter()
    run(n_queries)
    return (time.perf_counter() - start) / n_queries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m xmr_core.bench metrics", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--concepts", type=int, default=80)
    parser.add_argument(
        "--tm-queries", type=int, default=200, help="queries per direction timed in torchmetrics"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = select_device(args.device)
    scores, caption_image, relevance, labels = _inputs(
        args.images, args.captions_per_image, args.concepts, args.seed, device
    )
    n_img, n_cap = scores.shape
    print(
        f"scores {n_img} x {n_cap} on {device}, {args.threads} threads; instance relevance "
        f"({args.captions_per_image} captions an image); {args.concepts}-dim labels for PMRP (zeta 0, 1, 2)"
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    load = os.getloadavg()[0]
    result, seconds, cpu_s = _ours(scores, caption_image, relevance, labels, args.progress)
    peak_gb = _peak_rss_gb()
    for key in sorted(result):
        print(f"  {key:<24} {result[key]:10.3f}")
    print(
        f"xmr_core.metrics: all metrics, both directions, 5K + 1K folds + PMRP: {seconds['all']:.2f} s "
        f"(5K R@K/medR/meanR/R-P/mAP@R both directions {seconds['5k']:.2f} s, 1K folds {seconds['1k']:.2f} s, "
        f"PMRP i2t {seconds['i2t']:.2f} s, t2i {seconds['t2i']:.2f} s); "
        f"CPU time {cpu_s:.2f} s; load average {load:.1f} on {os.cpu_count()} cores at the start"
    )
    print(f"peak RSS {peak_gb:.2f} GB (whole process, incl. the inputs)")
    cuda_peak = ""
    if device.type == "cuda":
        cuda_gb = torch.cuda.max_memory_allocated(device) / 1024**3
        print(f"CUDA peak allocated {cuda_gb:.2f} GB")
        cuda_peak = f" cuda_peak_gb={cuda_gb:.3f}"

    rel_t2i = np.ascontiguousarray(relevance.T)
    tm_i2t = _torchmetrics_per_query(scores, relevance, min(args.tm_queries, n_img))
    tm_t2i = _torchmetrics_per_query(scores.T, rel_t2i, min(args.tm_queries, n_cap))
    tm_s = tm_i2t * n_img + tm_t2i * n_cap
    speedup = tm_s / seconds["5k"]
    print(
        f"torchmetrics RetrievalHitRate@1/5/10 + RetrievalRPrecision on {args.tm_queries} queries a direction: "
        f"{tm_i2t * 1e3:.2f} ms per i2t query, {tm_t2i * 1e3:.2f} ms per t2i query; extrapolated to all "
        f"{n_img} + {n_cap} queries: {tm_s:.1f} s (extrapolated, not run in full)"
    )
    print(f"speed ratio on the same work (instance R@K + R-P, both directions): {speedup:.1f}x")
    print(
        f"wall_s={seconds['all']:.3f} cpu_s={cpu_s:.3f} instance_s={seconds['5k']:.3f} peak_gb={peak_gb:.3f}{cuda_peak} "
        f"torchmetrics_s={tm_s:.2f} speedup_vs_torchmetrics={speedup:.1f} device={device.type}"
    )


if __name__ == "__main__":
    main()
