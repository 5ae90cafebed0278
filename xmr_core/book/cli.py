"""`xmr`: the command line; its help opens with the command that builds the book to read (`xmr book build`).
`xmr book list`, `xmr book run [CHAPTER ...] [--profile P] [-p NAME VALUE ...] [--yes]` (profiles cpu and paper
first state what they would train and, without --yes, ask, or off a terminal refuse: `confirm_training`),
`xmr book plan [CHAPTER ...] [--profile P] [--measure-steps K] [--train-images N]` (every training run the
notebooks ask for, by stage, with its cost: `xmr_core.book.plan`), `xmr book run ... --jobs N` (batches of runs on N workers),
`xmr book build [--profile P]` (the HTML book from the executed notebooks, or from the committed results),
`xmr results check [--results DIR]` (the results whose inputs changed since they were written), `xmr results restyle
[FIGURE ...]` (figures drawn from committed tables, redrawn by today's code: `xmr_core.chapters.restyle`);
`xmr claims recompute CHAPTER|CLAIM` (verdicts judged again from the committed run records: `book.recompute`);
`xmr runs pack --profile P [-o FILE]`, `xmr runs unpack ARCHIVE`, `xmr runs ls [--profile P]` (the run archive:
`xmr_core.runs.archive`), `xmr runs train CHAPTER ... --jobs N` (the chapters' runs trained into the cache, no
results written)."""

from __future__ import annotations

import argparse
import os
import sys

from xmr_core.config import PROFILES

START = ("Start here: `xmr book build` builds the book to read from the committed results (about a minute, nothing "
         "trained), then open book/_build/cpu/html/index.html.")


class TopParser(argparse.ArgumentParser):
    """`xmr`'s own parser: its help opens with `START`, before the usage line."""

    def format_help(self) -> str:
        return f"{START}\n\n{super().format_help()}"


def build_parser() -> argparse.ArgumentParser:
    parser = TopParser(prog="xmr", description="The xmr replication book: five papers on image-text retrieval "
                                               "under one-to-many correspondence, rerun on a synthetic benchmark.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)
    book = sub.add_parser("book", help="list or run the book's chapters").add_subparsers(dest="action", required=True)
    book.add_parser("list", help="chapters, their notebooks and the results each wrote (their provenance in results/), "
                                 "with the count")
    run = book.add_parser("run", help="execute chapters with papermill (all chapters when none is named)")
    run.add_argument("chapters", nargs="*", help="chapter folders or names (01_pcme or pcme), or notebooks (01_pcme/train)")
    run.add_argument("--profile", choices=PROFILES, default="cpu", help="smoke | cpu (default) | paper | paper-smoke (the paper code path, smoke budget)")
    run.add_argument(
        "-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
        help="inject a notebook parameter (VALUE parsed as a Python literal when possible)",
    )
    run.add_argument("--force", action="store_true", help="rerun notebooks whose inputs are unchanged")
    run.add_argument("--yes", action="store_true", help="train what the cache lacks without asking (profiles cpu "
                     "and paper ask first, and refuse when stdin is not a terminal)")
    run.add_argument("--jobs", type=int, help="train each batch of independent runs on N worker processes of one "
                     "torch thread each (XMR_JOBS; XMR_EXECUTOR=slurm submits them to Slurm instead)")
    plan = book.add_parser("plan", help="list every training run the notebooks ask for, by stage, cached or not, "
                                        "with its cost, and the totals (core-hours, wall at 1, 2 and N workers); "
                                        "trains nothing, writes no result")
    plan.add_argument("chapters", nargs="*", help="chapters or notebooks, as for run (all when none is named)")
    plan.add_argument("--profile", choices=PROFILES, default="cpu", help="smoke | cpu (default) | paper | paper-smoke (the paper code path, smoke budget)")
    plan.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                      help="inject a notebook parameter, as for run")
    plan.add_argument("--jobs", type=int, default=16, help="N of the wall-time estimate (default 16)")
    plan.add_argument("--measure-steps", type=int, default=0, metavar="K",
                      help="time K training steps of each shape of run to train (on the plan's DEVICE) and cost "
                           "every such run as its seconds a step x epochs x steps an epoch (default 0: not timed)")
    plan.add_argument("--train-images", type=int, metavar="N",
                      help="with --measure-steps: plan for a training split of N images (the paper's data set, "
                           "planned from a small copy in its layout): each run's steps scale by N / its own")
    build = book.add_parser(
        "build", help="the HTML book (Jupyter Book) from the executed notebooks, into book/_build/<profile>/html"
    )
    build.add_argument("--profile", choices=PROFILES, default="cpu", help="whose executed notebooks (default cpu)")
    build.add_argument("--dataset", default="scenes", help="whose results folder the results pages show (default "
                       "scenes; the paper profile's: the data set it ran on, results/paper/<dataset>)")
    build.add_argument("--verbose", action="store_true", help="show Sphinx's messages")
    results = sub.add_parser("results", help="check the committed results").add_subparsers(dest="action", required=True)
    check = results.add_parser("check", help="list the results whose inputs changed since they were written; "
                                             "exit 1 if any is stale or cannot be checked")
    check.add_argument("--results", default="results", help="results folder (default results/)")
    diff = results.add_parser("diff", help="the results in the working tree against a commit's, by what they "
                                           "show (numbers, cells, pixels; not when or how fast they were written); "
                                           "exit 1 if any differs")
    diff.add_argument("chapters", nargs="*", help="results folders or chapters (pcme, 01_pcme; all when none)")
    diff.add_argument("--rev", default="HEAD", help="the commit to compare with (default HEAD)")
    diff.add_argument("--results", default="results", help="results folder (default results/)")
    restyle = results.add_parser("restyle", help="redraw by today's code, without their models, the figures a "
                                                 "notebook draws from tables it writes (from the committed tables)")
    restyle.add_argument("keys", nargs="*", help="figures (default: every one drawn from committed tables)")
    restyle.add_argument("--results", default="results", help="results folder (default results/)")
    claims = sub.add_parser("claims", help="the claims' verdicts").add_subparsers(dest="action", required=True)
    recompute = claims.add_parser("recompute", help="judge a chapter's claims (or one claim) again from the "
                                  "committed run records alone and print each beside its committed judgement; exit "
                                  "1 if any differs or none is bound to records")
    recompute.add_argument("target", help="a chapter (pcme, 01_pcme) or a claim's key")
    recompute.add_argument("--results", default="results", help="results folder (default results/; its records: "
                           "runs/records/ of the project, or beside any other results folder, e.g. smoke's "
                           "book/_build/smoke/results)")
    runs = sub.add_parser("runs", help="the run cache and its archive").add_subparsers(dest="action", required=True)
    pack = runs.add_parser("pack", help="the runs a profile's executed notebooks load, with their inputs, into one "
                                        "archive")
    pack.add_argument("--profile", choices=PROFILES, default="cpu", help="whose executed notebooks (default cpu)")
    pack.add_argument("-o", "--output", help="archive path (default xmr-runs-<profile>.tar.gz)")
    unpack = runs.add_parser("unpack", help="verify an archive and restore it into the cache ($XMR_CACHE)")
    unpack.add_argument("archive")
    train = runs.add_parser("train", help="train every run of the named chapters into the run cache on N workers: "
                                          "the notebooks execute into a temporary folder and their results are "
                                          "discarded (never written to results/); `xmr book run` then loads the runs")
    train.add_argument("chapters", nargs="+", help="chapters or notebooks (01_pcme, pcme, pcme/train)")
    train.add_argument("--profile", choices=PROFILES, default="cpu", help="smoke | cpu (default) | paper | paper-smoke (the paper code path, smoke budget)")
    train.add_argument("--jobs", type=int, default=1, help="worker processes of one torch thread each (default 1)")
    train.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                       help="inject a notebook parameter, as for book run")
    ls = runs.add_parser("ls", help="what the cache holds; with --profile, what each notebook needs and lacks")
    ls.add_argument("--profile", choices=PROFILES, help="also list each executed notebook's runs")
    ls.add_argument("--jobs", type=int, default=16, help="N of the cold wall-time estimate (default 16)")
    return parser


def results_restyle(keys: list[str], folder: str) -> int:
    """`xmr results restyle`: `xmr_core.chapters.restyle` in a process of its own (the book runs chapter code as it
    runs notebooks, without importing it)."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "xmr_core.chapters.restyle", "--results", folder, *keys],
                          check=False).returncode


def results_check(folder: str) -> int:
    from pathlib import Path

    from xmr_core.book.staleness import check_results, print_report
    from xmr_core.config import project_root

    root = project_root()
    path = Path(folder) if Path(folder).is_absolute() else root / folder
    if not path.is_dir():
        raise SystemExit(f"xmr results check: no results folder {path}")
    report = check_results(path, root)
    print_report(report)
    return 0 if report.ok else 1


def results_diff(chapters: list[str], rev: str, folder: str) -> int:
    import re
    from pathlib import Path, PurePosixPath

    from xmr_core.book import diff
    from xmr_core.config import project_root

    root = project_root()
    results = Path(folder) if Path(folder).is_absolute() else root / folder
    if not results.resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"xmr results diff: {results} is outside the project {root}")
    base = results.resolve().relative_to(root.resolve()).as_posix()
    if chapters:  # a chapter's folder drops its number: 01_pcme writes results/pcme
        names = [re.sub(r"^\d+_", "", c) for c in chapters]
    else:
        committed = {PurePosixPath(rel).relative_to(base).parts for rel in diff.committed_files(root, base, rev)}
        present = {p.name for p in results.iterdir() if p.is_dir()} if results.is_dir() else set()
        names = sorted({parts[0] for parts in committed if len(parts) > 1} | present)
    try:
        report = diff.compare_committed(root, [f"{base}/{name}" for name in names], rev)
    except diff.DiffError as err:
        raise SystemExit(f"xmr results diff: {err}") from None
    return 0 if diff.print_diff(report, rev) else 1


def claims_recompute(target: str, folder: str) -> int:
    from pathlib import Path

    from xmr_core.book import recompute
    from xmr_core.book.results import records_home
    from xmr_core.config import project_root
    from xmr_core.records import RecordError

    results = Path(folder) if Path(folder).is_absolute() else project_root() / folder
    try:
        rows = recompute.recompute(target, results, records_home(results))
    except (RecordError, KeyError, ValueError) as err:
        raise SystemExit(f"xmr claims recompute: {err}") from None
    if not rows:
        print(f"xmr claims recompute: no claim of {target!r} is bound to run records under {results} "
              f"(results/<chapter>/{recompute.BINDINGS.format(part='<notebook>')})", file=sys.stderr)
        return 1
    return 0 if recompute.print_recomputed(rows) else 1


def runs_main(args: argparse.Namespace) -> int:
    from xmr_core.book import plan as bookplan
    from xmr_core.book import runner
    from xmr_core.runs import archive as runarchive

    if args.action == "train":
        if args.jobs < 1:
            raise SystemExit(f"xmr runs train: --jobs must be >= 1, got {args.jobs}")
        params = {name: runner.parse_value(value) for name, value in args.parameter}
        return 0 if bookplan.train_runs(args.chapters, args.profile, args.jobs, params) else 1
    try:
        if args.action == "pack":
            runarchive.pack(args.profile, args.output or runarchive.archive_name(args.profile))
        elif args.action == "unpack":
            runarchive.unpack(args.archive)
        else:
            missing = runarchive.list_cache(args.profile, workers=sorted({1, 2, args.jobs, os.cpu_count() or 1}))
            return 1 if any(missing.values()) else 0
    except runarchive.ArchiveError as err:
        print(f"xmr runs {args.action}: {err}", file=sys.stderr)
        return 1
    return 0


def confirm_training(chapters: list[str], profile: str, yes: bool) -> bool:
    """Before `xmr book run` of profile cpu or paper (hours to days cold; smoke trains in minutes and is never
    held): print what it would train (`book.plan.cold_cost`) when that is anything; unless `yes`, ask on a terminal,
    and with stdin not a terminal refuse in one line naming --yes (SystemExit). True to go on."""
    from xmr_core.book import plan as bookplan
    from xmr_core.book import runner

    if profile == "smoke":
        return True
    cost = bookplan.cold_cost(runner.resolve_chapters(chapters), profile)
    if not cost.trains:
        return True
    print(cost.line())
    if yes:
        return True
    if not sys.stdin.isatty():
        raise SystemExit("xmr book run: not started: it would train runs and stdin is not a terminal; add --yes to "
                         "train them (or restore the run archive first: `xmr runs unpack`)")
    return input("Train them now? [y/N] ").strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    from xmr_core.book import runner

    args = build_parser().parse_args(argv)
    if args.command == "results":
        if args.action == "diff":
            return results_diff(args.chapters, args.rev, args.results)
        if args.action == "restyle":
            return results_restyle(args.keys, args.results)
        return results_check(args.results)
    if args.command == "runs":
        return runs_main(args)
    if args.command == "claims":
        return claims_recompute(args.target, args.results)
    if args.action == "list":
        runner.list_book()
        return 0
    if args.action == "build":
        from xmr_core.book import html as book_html

        book_html.build_html(args.profile, quiet=not args.verbose, dataset=args.dataset)
        return 0
    params = {name: runner.parse_value(value) for name, value in args.parameter}
    if args.action == "plan":
        from xmr_core.book import plan as bookplan

        plan = bookplan.plan_book(args.chapters, profile=args.profile, params=params,
                                  measure_steps=args.measure_steps, train_images=args.train_images)
        plan.print(sorted({1, 2, args.jobs, os.cpu_count() or 1}))
        return 1 if plan.failed else 0
    if not confirm_training(args.chapters, args.profile, args.yes):
        return 1
    summary = runner.run_book(args.chapters, profile=args.profile, params=params, force=args.force, jobs=args.jobs)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
