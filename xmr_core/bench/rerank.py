"""Benchmark: DVSE's Fast Re-ranking (FR, Eq. 13-15) on a COCO 5K-sized score matrix, and the RR / MR
re-rankers of DVSE Table IV.

`python -m xmr_core.bench rerank [--images 5000] [--captions 25000] [--fraction F] [--threads T]`

FR runs on the full images x captions matrix in both directions (`fast_rerank_pair`); its time and the
process's memory above what it held before FR (the input is already there) are printed, against the output
size (two matrices) that any FR must write. RR and MR (nearest-neighbour re-rankers, O(n_query k n_query)
comparisons) score only the first `--fraction` of the query rows of each direction, and their times are
extrapolated linearly to all rows. CPU only (the paper's Table IV times are on a GPU machine).
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from xmr_core.similarity import DEFAULT_CHUNK, fast_rerank_pair, multivariate_rerank, reciprocal_rerank


def _rss_gb() -> float:
    """Current resident set size of this process (Linux /proc), GiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**30


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench rerank", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--captions", type=int, default=25000)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK)
    parser.add_argument("--fraction", type=float, default=0.02, help="share of query rows RR and MR score")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0.0 < args.fraction <= 1.0:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.threads:
        torch.set_num_threads(args.threads)

    n, m = args.images, args.captions
    gen = torch.Generator().manual_seed(args.seed)
    scores = torch.rand(n, m, generator=gen).mul_(2).sub_(1)  # cosine-like scores in [-1, 1]
    matrix_gb = n * m * 4 / 2**30
    print(f"device=cpu threads={torch.get_num_threads()} dtype=float32 problem: {n} images x {m} captions "
          f"({matrix_gb:.3f} GiB a matrix)")

    rss_before = _rss_gb()
    start = time.perf_counter()
    i2t, t2i = fast_rerank_pair(scores, (25.0, 25.0), (20.0, 20.0), chunk_size=args.chunk_size)
    fr_s = time.perf_counter() - start
    fr_extra = _peak_rss_gb() - rss_before
    if not (torch.isfinite(i2t).all() and torch.isfinite(t2i).all()):
        raise RuntimeError("FR produced a non-finite value")
    del i2t, t2i
    block_gb = 3 * args.chunk_size**2 * 4 / 2**30
    print(f"FR (both directions, gamma = (25, 25), lambda = (20, 20)): {fr_s:.3f} s; memory above the input "
          f"{fr_extra:.3f} GiB (the two outputs: {2 * matrix_gb:.3f} GiB; block temporaries ~{block_gb:.3f} GiB)")

    times = {}
    for name, fn, k in (("rr", reciprocal_rerank, (15, 20)), ("mr", multivariate_rerank, (30, 30))):
        total = 0.0
        for matrix, kk in ((scores, k[0]), (scores.T, k[1])):
            rows = max(1, round(args.fraction * matrix.shape[0]))
            start = time.perf_counter()
            fn(matrix, k=kk, rows=slice(0, rows))  # the reverse ranks still read every query's scores
            total += (time.perf_counter() - start) * matrix.shape[0] / rows
        times[name] = total
        print(f"{name.upper()} (both directions, extrapolated from {args.fraction:.3g} of the query rows): {total:.1f} s")
    print(f"fr_s={fr_s:.3f} fr_extra_gb={fr_extra:.3f} outputs_gb={2 * matrix_gb:.3f} rr_s_est={times['rr']:.1f} "
          f"mr_s_est={times['mr']:.1f} fraction={args.fraction:.4g} images={n} captions={m} device=cpu")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
