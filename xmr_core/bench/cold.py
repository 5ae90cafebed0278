"""`python -m xmr_core.bench cold [CHAPTER ...]`: a cold run of chapters, timed per notebook, to a target.

Runs `xmr book run CHAPTER ... --profile P --force` with an empty run cache (`XMR_CACHE` set to a fresh
temporary directory: the benchmark, the trunk's pretraining, its features and every training run are
made again) and the results written to a temporary directory (`RESULTS_DIR`), so `results/` and the user's
cache are left alone; the executed notebooks land in `book/_build/<profile>/` as any run's do. Prints each
notebook's seconds, the total, and whether it is within `--target-min` minutes (issue 12: `00_benchmark
01_pcme` on the cpu profile in at most 45 minutes on 2 cores). Default chapters: 00_benchmark 01_pcme.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from xmr_core import book


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench cold",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", default=["00_benchmark", "01_pcme"])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--target-min", type=float, default=45.0, help="target for the whole run, minutes")
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
    within = summary.ok and total <= 60 * args.target_min
    print(f"total {total / 60:.1f} min (target <= {args.target_min:g} min): {'met' if within else 'NOT met'}"
          + ("" if summary.ok else f"; {summary.count('failed')} notebook(s) failed"))
    print(f"total_s={total:.1f} target_s={60 * args.target_min:.0f} met={within} "
          f"notebooks={len(summary.outcomes)} failed={summary.count('failed')} profile={args.profile}")
