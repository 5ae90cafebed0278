"""`xmr book plan` and `xmr runs train`: the book's training runs listed, or trained, without writing results/.

`plan_book` executes the selected notebooks in trace mode (`xmr_core.runs.trace`: `XMR_PLAN`), into a temporary
folder (executed notebooks, run logs and results: never book/_build or results/); the executed copy of a notebook
that fails is kept, with its traceback, in `book/_build/<profile>/plan-failed/` and its path printed. Every run a notebook asks
`fit` for is listed, cached or not; a missing one is not trained, so the notebook goes on with an untrained model
(its tables are meaningless and thrown away) and what it asks for afterwards is provisional (its setting may
depend on the missing run: a tuned learning rate). The listing (`Plan.print`) gives each distinct run once (the
first time it is asked for) by notebook and stage, with notebook, label, method, seed, run key, status, provisional and
cost, then the totals: runs, cached, read from fit summaries, needing weights, to train, core-hours, and the wall time at
1, 2 and N workers. A run's status (`PlannedRun.status`): `cached` (its weights in the run cache), `recorded` (the cache
lacks it, its fit summary stands in, `runs.fits`: no training; its tables and claims come from its run record),
`needs weights` (a figure draws its model: trained where the cache lacks it, though its summary is there), `to
train` (neither). The plan sees the profile's committed fit summaries and records: the temporary results folder's
records home holds links to them (`_link_records`).

Cost of a run, in core-seconds (`train_seconds` x torch threads):
- cached: recorded in its `result.json`;
- with a fit summary (recorded, or needing weights): the seconds the summary records;
- to train, `cpu` profile: the `train s` the committed results record for the same run (results/<chapter>/*.csv
  with a `run` column);
- else, with `--measure-steps K` (`XMR_PLAN_STEPS`, `runs.trace`: K training steps of each shape of missing run
  timed on a copy of its model, on the plan's device): its core-seconds a step x its schedule's epochs x its steps
  an epoch (`per step`). `--train-images N` plans for a training split of N images (the paper's data set, planned
  from a small copy in its layout such as the test fixtures): the items an epoch covers scale by N / its own
  split's images, in batches of its batch size. The schedule's epochs are the most a run trains (patience may stop it after half of them and `patience`
  more; an extension may add `extend_epochs`), and the validation after each epoch is not counted;
- else, `cpu` profile: the median `train s` of that method's committed runs (the method is the run directory's
  prefix); else `DEFAULT_CORE_SECONDS[profile]`.
  Committed `train s` were measured with torch's default threads on the 2-core machine; a one-thread run takes
  about as long or longer, so core-hours from them are a lower estimate.
A run asked for on inputs the trace did not compute (the paper profile's trunk features, `experiment.protocols`) is
counted as `stand-in`: its key changes once they exist, its cost does not.
Wall time: each notebook's batches run one after another, a batch's runs side by side (`runs.plan.fit_many`), so the
wall at W workers is the sum, over (notebook, batch), of that batch's missing runs packed on W workers (longest
first, `runs.trace.cold_wall`); cold, the same over every run, cached or not, each in the batch that first asks
for it.

`train_runs` executes the selected notebooks with the executor of `--jobs N` (`XMR_JOBS`) into a temporary folder:
every run is trained into the run cache, no result is written to results/; `xmr book run` then finds them cached.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from xmr_core.book.results import records_home, results_folder
from xmr_core.book.runner import Notebook, chapters, check_parameters, execute_notebook, resolve_chapters
from xmr_core.book.staleness import result_metas
from xmr_core.config import check_profile, project_root
from xmr_core.io import atomic_write_bytes
from xmr_core.runs.executors import JOBS_ENV
from xmr_core.runs.fits import FITS_DIR, SUFFIX, WEIGHTS_ENV
from xmr_core.runs.record import records_root
from xmr_core.runs.trace import PLAN_ENV, STEPS_ENV, cold_wall, read_plan

LEADERBOARD = "06_leaderboard"  # reads the tuning tables of the chapters whose models it ranks:
LEADERBOARD_READS = ("pcme", "msrm", "dvse", "hrem")  # `chapters.leaderboard.BOOK_MODELS`' chapters (a test checks)
# Each of the papers' data sets and the chapters whose papers used it, in the order the book runs them on it (the
# leaderboard reads the tuning tables of the chapters before it): `tests/test_book_paper.py`, `bench paperplan`.
PAPER_BOOKS: dict[str, tuple[str, ...]] = {"cub": ("01_pcme", "02_msrm", "04_dvse"),
                                           "coco": ("03_hrem", "01_pcme", "02_msrm", "04_dvse", "06_leaderboard"),
                                           "vg": ("05_hmrn",)}
DEFAULT_CORE_SECONDS = {"smoke": 5.0, "cpu": 600.0, "paper": 3600.0, "paper-smoke": 5.0}  # a run with nothing better to go by


@dataclass
class PlannedRun:
    """One distinct run of the plan (the first request for its key) and its cost."""

    record: dict[str, Any]  # the trace record (`runs.trace.record`)
    core_seconds: float
    source: str  # "recorded" | "summary" | "results" (this run's committed row) | "per step" | "method median" |
    # "default"

    @property
    def cached(self) -> bool:
        return bool(self.record["cached"])

    @property
    def chapter(self) -> str:
        """The chapter of the notebook that first asked for the run ("01_pcme" of "book/01_pcme/train.py")."""
        return Path(str(self.record["notebook"])).parent.name

    @property
    def status(self) -> str:
        """"cached", "recorded" (its fit summary stands in: no training), "needs weights" (a figure draws it: to
        train, though summarised) or "to train"."""
        if self.cached:
            return "cached"
        if self.record.get("needs_weights"):
            return "needs weights"
        return "recorded" if self.record.get("summary") else "to train"

    @property
    def trains(self) -> bool:
        """Whether executing the notebook trains it (`status` "needs weights" or "to train")."""
        return self.status in ("needs weights", "to train")


@dataclass
class Plan:
    """The runs of the executed notebooks, in the order first asked for, and the notebooks that failed."""

    profile: str
    runs: list[PlannedRun]
    failed: list[tuple[str, str]] = field(default_factory=list)  # (notebook, first error line)
    requests: int = 0  # requests in all (a run asked for again is counted here, listed once)
    train_images: int | None = None  # the training split's images planned for (`build_plan`); None: the trace's own

    @property
    def keys(self) -> set[str]:
        return {r.record["key"] for r in self.runs}

    def wall_seconds(self, workers: int, cold: bool = False) -> float:
        """Estimated wall seconds to train the missing runs (`cold`: every run, cached or not) on `workers`: each run
        in the batch that first asks for it, a batch packed longest first, batches one after another
        (`runs.trace.cold_wall`)."""
        return cold_wall(((r.record["notebook"], r.record.get("batch"), r.core_seconds) for r in self.runs
                          if cold or r.trains), workers)

    def totals(self) -> dict[str, float]:
        to_train = [r for r in self.runs if r.trains]
        return {"runs": len(self.runs), "cached": sum(r.cached for r in self.runs),
                "recorded": sum(r.status == "recorded" for r in self.runs),
                "needs weights": sum(r.status == "needs weights" for r in self.runs), "to train": len(to_train),
                "provisional": sum(bool(r.record["provisional"]) for r in to_train),
                "stand-in": sum(bool(r.record.get("stand_in")) for r in self.runs),
                "recorded core-h": sum(r.core_seconds for r in self.runs if not r.trains) / 3600,
                "estimated core-h": sum(r.core_seconds for r in to_train) / 3600}

    def frame(self) -> pd.DataFrame:
        """One row a run: stage, notebook, label, method, seed, run key, status, provisional, cost and its source."""
        return pd.DataFrame([{"stage": r.record["stage"], "notebook": r.record["notebook"],
                              "label": r.record["label"], "method": r.record["method"], "seed": r.record["seed"],
                              "key": r.record["key"][:16], "status": r.status,
                              "provisional": bool(r.record["provisional"]),
                              "core-s": round(r.core_seconds, 1), "cost": r.source} for r in self.runs],
                            columns=["stage", "notebook", "label", "method", "seed", "key", "status", "provisional",
                                     "core-s", "cost"])

    def print(self, workers: Sequence[int], echo: Callable[[str], None] = print) -> None:
        """Every run by notebook and stage (a stage's runs are independent: they train side by side), then the
        totals."""
        frame = self.frame()
        for (notebook, stage), rows in frame.groupby(["notebook", "stage"], sort=False):
            trains = int(rows["status"].isin(["needs weights", "to train"]).sum())
            echo(f"{notebook} stage {stage}: {len(rows)} run(s), {trains} to train")
            echo(rows.drop(columns=["notebook", "stage"]).to_string(index=False))
        t = self.totals()
        echo(f"plan ({self.profile} profile): {t['runs']} runs ({self.requests} requests), {t['cached']} cached, "
             f"{t['recorded']} from fit summaries and records (no training), {t['to train']} to train "
             f"({t['needs weights']} needing weights: a figure draws the model; {t['provisional']} provisional: their "
             f"setting may change once earlier runs train)")
        echo(f"core-hours: {t['recorded core-h']:.2f} recorded (cached or summarised, not trained) + "
             f"{t['estimated core-h']:.2f} to train = {t['recorded core-h'] + t['estimated core-h']:.2f}; cold (every "
             f"run trained, no summaries): {sum(r.core_seconds for r in self.runs) / 3600:.2f}")
        echo("wall to train the missing runs: " + ", ".join(
            f"{w} worker{'s' * (w > 1)} {self.wall_seconds(w) / 3600:.2f} h" for w in workers))
        echo("wall to train every run (cold, no summaries): " + ", ".join(
            f"{w} worker{'s' * (w > 1)} {self.wall_seconds(w, cold=True) / 3600:.2f} h" for w in workers))
        sources = frame.loc[frame["status"].isin(["needs weights", "to train"]), "cost"].value_counts()
        echo("costs of the runs to train: " + (", ".join(f"{n} {source}" for source, n in sources.items()) or "none")
             + ("" if self.train_images is None else
                f"; steps scaled to a training split of {self.train_images:,} images (--train-images)"))
        if t["stand-in"]:
            echo(f"{t['stand-in']} run(s) listed on stand-in inputs (features the trace did not extract): their keys "
                 "change once the features exist, their cost does not")
        for notebook, error in self.failed:
            echo(f"incomplete: {notebook} failed in trace mode ({error}); runs it would ask for later are missing")


@dataclass
class ColdCost:
    """What `xmr book run` would train, known before any notebook starts and without a trace (`cold_cost`)."""

    profile: str
    runs: list[str]  # runs to train: named, and missing from the cache and from the fit summaries
    core_seconds: float  # their estimated cost (`estimated_cost`)
    unknown: list[str]  # notebooks whose runs are not known here (no run log, no committed runs of the profile)
    summarised: int = 0  # runs missing from the cache that their committed fit summaries stand in for

    @property
    def trains(self) -> bool:
        return bool(self.runs or self.unknown)

    def line(self) -> str:
        """One line: the runs to train and their core-hours, where they were read, what is not counted."""
        unknown = (f"; and the runs of {len(self.unknown)} notebook(s) not known here: {', '.join(self.unknown)}"
                   if self.unknown else "")
        summarised = (f"; {self.summarised} more the cache lacks stand in by their committed fit summaries and "
                      "records (no training; a figure that draws one trains it)" if self.summarised else "")
        return (f"xmr book run: profile {self.profile}: {len(self.runs)} run(s) to train that the cache lacks, at "
                f"least {self.core_seconds / 3600:.2f} core-hours (runs named by each notebook's last run log, else "
                f"by its committed tables){summarised}{unknown}. `xmr book plan --profile {self.profile}` lists every "
                f"run; docs/training.md, \"What it costs\"")


def cold_cost(notebooks: Sequence[Notebook], profile: str, root: Path | None = None,
              cache: Path | None = None) -> ColdCost:
    """The runs `notebooks` would train and their cost, read without executing anything: each notebook's runs are
    those its last run log of `profile` names (`runs.archive.profile_logs`), else, on the cpu profile, those its
    committed results' tables name (`committed_run_rows`; a lower bound: tables name the train and tuning runs, not
    every ablation's, and a notebook with committed results but no such table counts none); a run is to train when
    the cache has not finished it (`runs.archive.finished_runs`) and the profile's committed fit summaries lack it
    (`runs.fits`: those it has are counted apart, `summarised`). A notebook with neither is `unknown`. Costs as the
    plan's (`estimated_cost`)."""
    from xmr_core.config import cache_dir
    from xmr_core.runs.archive import finished_runs, profile_logs
    from xmr_core.runs.log import read_log

    root, cache = root or project_root(), cache or cache_dir()
    logs = profile_logs(profile, root)
    committed: dict[str, list[str]] = {}
    if profile == "cpu" and (root / "results").is_dir():
        committed = {str(meta.get("notebook")): [] for _, meta in result_metas(root / "results")}
        for notebook, name, _ in committed_run_rows(root):
            committed.setdefault(notebook, []).append(name)
    per_run, per_method = committed_costs(root) if profile == "cpu" else ({}, {})
    finished = finished_runs(cache)
    runs: dict[str, None] = {}
    unknown = []
    for nb in notebooks:
        if nb.label in logs:
            names = [r["name"] for r in read_log(logs[nb.label]) if r["kind"] == "run"]
        elif nb.source.relative_to(root).as_posix() in committed:
            names = committed[nb.source.relative_to(root).as_posix()]
        else:
            unknown.append(nb.label)
            continue
        runs.update(dict.fromkeys(n for n in names if n not in finished))
    fits = committed_records(profile, root=root) / FITS_DIR
    summarised = [n for n in runs if (fits / f"{n}{SUFFIX}").is_file()]
    to_train = [n for n in runs if n not in summarised]
    seconds = sum(estimated_cost(n, n.rsplit("-", 1)[0], profile, per_run, per_method)[0] for n in to_train)
    return ColdCost(profile, to_train, seconds, unknown, len(summarised))


def committed_records(profile: str, dataset: str = "scenes", root: Path | None = None) -> Path:
    """The records folder of the profile's own results folder on `dataset` (`results_folder`) under the project
    `root` (default `project_root()`): its run records and fit summaries (`runs/records/<profile>/` under the
    project for the committed book, under book/_build/smoke for smoke)."""
    return records_root(profile, records_home((root or project_root()) / results_folder(profile, dataset)))


def _link_records(profile: str, dataset: str, home: Path) -> None:
    """Link every file of the profile's records folder (`committed_records`) into the same place under the records
    home `home` of a temporary results folder, so notebooks executed there read them; a file they write replaces
    its link (writes are renames), never the linked file."""
    source = committed_records(profile, dataset)
    if source.is_dir():
        shutil.copytree(source, records_root(profile, home), copy_function=os.symlink)


def committed_run_rows(root: Path) -> list[tuple[str, str, float | None]]:
    """(notebook, run directory name, train seconds or None) of every row of the committed results' tables with
    `run` and `train s` columns (results/<chapter>/*.csv; the notebook is the one the table's provenance names)."""
    rows = []
    for path in sorted((root / "results").glob("*/*.csv")):
        frame = pd.read_csv(path)
        if not {"run", "train s"} <= set(frame.columns):
            continue
        meta = path.with_suffix(".json")
        notebook = str(json.loads(meta.read_text(encoding="utf-8")).get("notebook")) if meta.is_file() else ""
        for name, seconds in zip(frame["run"].astype(str), frame["train s"]):
            if "-" in name:
                rows.append((notebook, name, float(seconds) if pd.notna(seconds) else None))
    return rows


def committed_costs(root: Path) -> tuple[dict[str, float], dict[str, float]]:
    """From the committed results (`committed_run_rows`): seconds per run directory name, and the median seconds
    per method (the run name's prefix before its key)."""
    per_run: dict[str, float] = {}
    per_method: dict[str, list[float]] = {}
    for _, name, seconds in committed_run_rows(root):
        if seconds is not None:
            per_run[name] = seconds
            per_method.setdefault(name.rsplit("-", 1)[0], []).append(seconds)
    return per_run, {m: statistics.median(v) for m, v in per_method.items()}


def estimated_cost(name: str, method: str, profile: str, per_run: dict[str, float],
                   per_method: dict[str, float]) -> tuple[float, str]:
    """A run to train's cost in core-seconds and its source: its committed `train s`, else its method's median,
    else `DEFAULT_CORE_SECONDS` of the profile."""
    if name in per_run:
        return per_run[name], "results"
    if method in per_method:
        return per_method[method], "method median"
    return DEFAULT_CORE_SECONDS.get(profile, DEFAULT_CORE_SECONDS["cpu"]), "default"


def per_step_cost(record: dict[str, Any], train_images: int | None = None) -> float | None:
    """A missing run's core-seconds from its trace record's measured cost a step (`runs.trace`): step x epochs x
    steps an epoch; with `train_images`, the steps of an epoch whose items scale by `train_images` / the run's
    training images (ceil(items x scale / batch)). None when not measured."""
    step = record.get("step_core_seconds")
    if step is None:
        return None
    steps = record["epoch_steps"] if train_images is None else math.ceil(
        record["epoch_items"] * train_images / record["train_images"] / record["batch_size"])
    return float(step) * record["epochs"] * steps


def build_plan(records: Iterable[dict[str, Any]], profile: str, root: Path, train_images: int | None = None) -> Plan:
    """The distinct runs of trace `records` (each key at its first request) with their costs (the module
    docstring; `train_images`: `per_step_cost`); a run a later request asks for with its weights (`needs_weights`)
    needs them."""
    per_run, per_method = committed_costs(root) if profile == "cpu" else ({}, {})
    runs: dict[str, PlannedRun] = {}
    n = 0
    for record in records:
        n += 1
        if record["key"] in runs:
            first = runs[record["key"]]
            if record.get("needs_weights") and not first.cached:
                first.record = {**first.record, "needs_weights": True}
            continue
        measured = per_step_cost(record, train_images)
        if record["cached"]:
            cost, source = float(record["core_seconds"]), "recorded"
        elif record.get("summary"):
            cost, source = float(record["core_seconds"]), "summary"
        elif record["run"] not in per_run and measured is not None:
            cost, source = measured, "per step"
        else:
            cost, source = estimated_cost(record["run"], record["method"], profile, per_run, per_method)
        runs[record["key"]] = PlannedRun(record, cost, source)
    return Plan(profile, list(runs.values()), requests=n, train_images=train_images)


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def failed_folder(profile: str, what: str) -> Path:
    """Where `xmr book plan` (`what` "plan") or `xmr runs train` ("train") keeps the executed copy of a notebook that
    failed: `book/_build/<profile>/<what>-failed/<chapter>/<notebook>.ipynb`, outside the temporary folder."""
    return project_root() / "book" / "_build" / profile / f"{what}-failed"


def _execute_aside(notebooks: list[Notebook], profile: str, params: dict[str, Any], folder: Path,
                   echo: Callable[[str], None], execute: Callable[[Notebook, Path, dict[str, Any]], None],
                   keep: Path) -> list[tuple[str, str]]:
    """Execute `notebooks` with their results and outputs under `folder`; (notebook, error) of those that fail, whose
    executed copy (with the traceback) is kept under `keep` and its path printed (a copy kept by an earlier failure
    of a notebook is removed when it runs again)."""
    own = check_parameters(notebooks, params, project_root() / "book")
    runner = {"PROFILE": profile, "RESULTS_DIR": str(folder / "results")}
    failed = []
    for nb in notebooks:
        echo(f"[run ] {nb.label} ...")
        output, kept = (base / nb.chapter / f"{nb.name}.ipynb" for base in (folder / "build", keep))
        kept.unlink(missing_ok=True)
        try:
            execute(nb, output, runner | own[nb.label])
        except Exception as exc:  # noqa: BLE001 - a failing notebook is reported, the others still run
            line = (f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', exc)}").splitlines()[0]
            failed.append((nb.label, line[:300]))
            echo(f"[FAIL] {nb.label}: {line[:300]}")
            if output.is_file():
                atomic_write_bytes(kept, output.read_bytes())
                echo(f"       executed notebook with the traceback: {kept}")
            else:
                echo("       no executed notebook (its kernel did not run it)")
    return failed


def with_upstream(notebooks: list[Notebook]) -> list[Notebook]:
    """`notebooks` with, before each, the `train.py` whose tables it reads and that is not among them: its own
    chapter's (ablate / visualise read its tuning table), those of the chapters whose models the leaderboard
    (`LEADERBOARD`) ranks (`LEADERBOARD_READS`)."""
    trains = {c.split("_", 1)[1]: nb for c, nbs in chapters().items() for nb in nbs if nb.name == "train"}
    ranked = [trains[name] for name in LEADERBOARD_READS]
    out: list[Notebook] = []
    for nb in notebooks:
        own = trains.get(nb.chapter.split("_", 1)[1])
        needs = ranked if nb.chapter == LEADERBOARD else [own] if own is not None and nb.name != "train" else []
        out += [t for t in needs if t not in out and t not in notebooks] + [nb]
    return out


def plan_book(names: Iterable[str] = (), profile: str = "cpu", params: dict[str, Any] | None = None,
              echo: Callable[[str], None] = print,
              execute: Callable[[Notebook, Path, dict[str, Any]], None] = execute_notebook,
              keep: Path | None = None, measure_steps: int = 0, train_images: int | None = None) -> Plan:
    """Execute the named chapters (all when empty) in trace mode and return their plan (nothing is trained); a
    failing notebook's executed copy is kept under `keep` (default `failed_folder(profile, "plan")`). A notebook that reads
    a `train.py`'s tables runs after it (`with_upstream`), so the plan lists that train.py's runs (its tuning) and
    what the notebook asks for after it is provisional (`chapters.recorded.recorded_tuning`). `measure_steps` K > 0:
    K training steps of each shape of missing run are timed (`XMR_PLAN_STEPS`); `train_images`: `build_plan`."""
    check_profile(profile)
    if measure_steps < 0 or (train_images is not None and train_images < 1):
        raise ValueError(f"measure_steps must be >= 0 and train_images >= 1, got {measure_steps}, {train_images}")
    notebooks = with_upstream(resolve_chapters(names))
    with tempfile.TemporaryDirectory(prefix="xmr-plan-") as tmp:
        trace = Path(tmp) / "plan.jsonl"
        trace.touch()
        _link_records(profile, str((params or {}).get("DATASET") or "scenes"), Path(tmp))
        with _environment(**{PLAN_ENV: str(trace), STEPS_ENV: str(measure_steps)}):
            failed = _execute_aside(notebooks, profile, params or {}, Path(tmp), echo, execute,
                                    keep or failed_folder(profile, "plan"))
        plan = build_plan(read_plan(trace), profile, project_root(), train_images)
    plan.failed = failed
    return plan


def train_runs(names: Iterable[str], profile: str, jobs: int, params: dict[str, Any] | None = None,
               echo: Callable[[str], None] = print,
               execute: Callable[[Notebook, Path, dict[str, Any]], None] = execute_notebook,
               keep: Path | None = None) -> bool:
    """Train every run of the named chapters into the run cache on `jobs` workers (the notebooks executed into a
    temporary folder, results discarded; a failing notebook's executed copy kept under `keep`, default
    `failed_folder(profile, "train")`); True when every notebook ran. Every run trains for its weights
    (`XMR_WEIGHTS=1`): no fit summary stands in."""
    check_profile(profile)
    notebooks = resolve_chapters(names)
    with tempfile.TemporaryDirectory(prefix="xmr-train-") as tmp, \
            _environment(**{JOBS_ENV: str(jobs), WEIGHTS_ENV: "1"}):
        failed = _execute_aside(notebooks, profile, params or {}, Path(tmp), echo, execute,
                                keep or failed_folder(profile, "train"))
    echo(f"xmr runs train: {len(notebooks) - len(failed)} notebook(s) ran, {len(failed)} failed; their runs are in "
         f"the run cache")
    return not failed
