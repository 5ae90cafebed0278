"""Benchmark: PCME's Monte-Carlo match-probability scorer on a COCO 5K-sized problem vs plain matmul.

`python -m xmr_core.bench similarity [--fraction F] [--device auto] [--threads T]`

Scores 5,000 query Gaussians against 25,000 gallery Gaussians (D=1024, J=7 samples each) with
`xmr_core.similarity` (sampling, then `match_probability_from_samples`), and, in the same run, times
`torch.matmul` over the same blocks, i.e. the same FLOP count `2 (N J) (M J) D` with no sampling, square root
or sigmoid. With `--fraction F < 1` only the first F of the query rows are scored and the row-proportional
times are extrapolated to the full size (the gallery is always full; its sampling time is not scaled).
`fraction_of_matmul` = matmul time / scorer time (full-size estimates); 1.0 would be a free scorer on top of
its matmul, the target is >= 0.5.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from xmr_core.config import select_device
from xmr_core.similarity import DEFAULT_CHUNK, match_probability_from_samples, sample_gaussian


def _timed(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def _peak_gb(device: torch.device) -> tuple[float, str]:
    """Peak memory so far: CUDA allocator peak on a GPU, the process's peak resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30, "cuda_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "process_rss"  # ru_maxrss is in KiB


def _blockwise_matmul(a: torch.Tensor, b: torch.Tensor, rows: int, cols: int) -> None:
    """`a (P, D) @ b (Q, D)^T` in `(rows, cols)` blocks, results discarded: the scorer's matmul work alone."""
    for i in range(0, len(a), rows):
        for j in range(0, len(b), cols):
            torch.matmul(a[i : i + rows], b[j : j + cols].T)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench similarity", description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="fraction of the query rows to score (default 1)")
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--gallery", type=int, default=25000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, help="items per block side")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds; the fastest of each stage is kept")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0.0 < args.fraction <= 1.0:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.threads:
        torch.set_num_threads(args.threads)

    device = select_device(args.device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    n = max(1, round(args.fraction * args.queries))
    scale = args.queries / n
    m, d, j, chunk = args.gallery, args.dim, args.samples, args.chunk_size

    def gaussians(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        mu = F.normalize(torch.randn(count, d, generator=gen, device=device), dim=1)
        return mu, torch.full((count, d), -6.0, device=device) + 0.5 * torch.rand(count, d, generator=gen, device=device)

    q, g = gaussians(n), gaussians(m)
    a, b = 30.0, 30.0  # PCME's COCO initialisation (15, 15) in the logistic-sigmoid convention
    print(f"device={device} threads={torch.get_num_threads()} dtype=float32")
    print(f"problem: {args.queries} x {m} Gaussians, D={d}, J={j}; scoring {n} query rows (fraction {n / args.queries:.4g})")

    # Warm-up on a small slice (kernel selection, allocator), not timed.
    warm_q = sample_gaussian(q[0][:8], q[1][:8], j, gen)
    match_probability_from_samples(warm_q, sample_gaussian(g[0][:chunk], g[1][:chunk], j, gen), a, b, chunk_size=chunk)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    # Repeat each stage, interleaved, and keep each stage's fastest time: shared machines are noisy.
    t_sample_g = t_sample_q = t_score = t_matmul = float("inf")
    for _ in range(args.repeats):
        zq = zg = fq = fg = None  # free the previous round's samples before drawing new ones
        t, zg = _timed(lambda: sample_gaussian(*g, j, gen), device)
        t_sample_g = min(t_sample_g, t)
        t, zq = _timed(lambda: sample_gaussian(*q, j, gen), device)
        t_sample_q = min(t_sample_q, t)
        t, scores = _timed(partial(match_probability_from_samples, zq, zg, a, b, chunk_size=chunk), device)
        t_score = min(t_score, t)
        if scores.shape != (n, m) or not bool(((scores >= 0) & (scores <= 1)).all()):
            raise RuntimeError(f"match probabilities of shape {tuple(scores.shape)} not all in [0, 1]")
        del scores
        fq, fg = zq.reshape(n * j, d), zg.reshape(m * j, d)
        t, _ = _timed(partial(_blockwise_matmul, fq, fg, chunk * j, chunk * j), device)
        t_matmul = min(t_matmul, t)
    peak, peak_kind = _peak_gb(device)

    flops = 2.0 * (n * j) * (m * j) * d
    wall = t_sample_g + t_sample_q + t_score
    full_scorer = t_sample_g + scale * (t_sample_q + t_score)
    full_matmul = scale * t_matmul
    fraction_of_matmul = full_matmul / full_scorer
    # Full-size working set of the scorer: inputs, samples, output and one (chunk J)^2 block (plus its sigmoid view).
    full_gb = 4 * ((args.queries + m) * d * (2 + j) + args.queries * m + 2 * (chunk * j) ** 2) / 2**30

    print(f"fastest of {args.repeats} interleaved rounds each:")
    print(f"sampling gallery {m}x{j}: {t_sample_g:.3f} s; sampling queries {n}x{j}: {t_sample_q:.3f} s")
    print(f"scorer (distances, sigmoid, J x J mean): {t_score:.3f} s = {flops / t_score / 1e9:.1f} GFLOP/s on its matmul")
    print(f"plain torch.matmul, same blocks and FLOPs ({flops:.3e}): {t_matmul:.3f} s = {flops / t_matmul / 1e9:.1f} GFLOP/s")
    print(f"peak memory ({peak_kind}): {peak:.2f} GB; full-size working-set estimate {full_gb:.2f} GB")
    if scale > 1:
        print(f"extrapolated x{scale:.1f} to all {args.queries} query rows: scorer {full_scorer:.1f} s, matmul {full_matmul:.1f} s")
    print(
        f"wall_s={wall:.3f} wall_s_full_est={full_scorer:.2f} matmul_s_full_est={full_matmul:.2f} "
        f"peak_gb={peak:.3f} peak_kind={peak_kind} full_working_set_gb={full_gb:.2f} flops={flops:.4e} "
        f"fraction={n / args.queries:.4g} fraction_of_matmul={fraction_of_matmul:.3f} device={device.type}"
    )
