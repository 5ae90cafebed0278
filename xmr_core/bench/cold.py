"""`python -m xmr_core.bench cold [CHAPTER ...]`: a cold run of chapters, timed per notebook.

Runs `xmr book run CHAPTER ... --profile P --force` with an empty run cache (`XMR_CACHE` set to a fresh
temporary directory: the benchmark, the trunk's pretraining, its features and every training run are
made again) and the results written to a temporary directory (`RESULTS_DIR`), so `results/` and the user's
cache are left alone; the executed notebooks land in `book/_build/<profile>/` as any run's do. Prints each
notebook's seconds and the total wall time, with the `XMR_JOBS` workers it ran on. There is no time target: the
2-core cold-time targets were withdrawn (issue 28: the tuning budget, 3 seeds and convergence come first), and the
book's cost is counted in core-hours by `xmr book plan`. Default chapters: 00_benchmark 01_pcme.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from xmr_core.book import runner as book


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench cold",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", default=["00_benchmark", "01_pcme"])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--root", type=Path, default=None, help="project root (default: this checkout)")
    args = parser.parse_args(argv)

    old = os.environ.get("XMR_CACHE")
    with tempfile.TemporaryDirectory(prefix="xmr-cold-") as tmp:
        os.environ["XMR_CACHE"] = str(Path(tmp) / "cache")
        try:
            summary = book.run_book(args.chapters, profile=args.profile, force=True, root=args.root,
                                    params={"RESULTS_DIR": str(Path(tmp) / "results")})
        finally:
            if old is None:
                os.environ.pop("XMR_CACHE", None)
            else:
                os.environ["XMR_CACHE"] = old
    total = sum(o.seconds for o in summary.outcomes)
    print(f"cold run of {' '.join(args.chapters)} (profile {args.profile}, cpu threads {os.cpu_count()}):")
    for o in summary.outcomes:
        print(f"  {o.notebook.label:<28} {o.status:<7} {o.seconds:8.1f} s")
    jobs = os.environ.get("XMR_JOBS", "1")
    print(f"total {total / 60:.1f} min on {jobs} worker(s)"
          + ("" if summary.ok else f"; {summary.count('failed')} notebook(s) failed"))
    print(f"total_s={total:.1f} jobs={jobs} notebooks={len(summary.outcomes)} failed={summary.count('failed')} "
          f"profile={args.profile}")
    if not summary.ok:
        raise SystemExit(1)
