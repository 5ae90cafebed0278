"""Where runs come from and who uses them: the code a run was trained at, and each notebook's run log.

- `trained_at()`: the commit (`git_commit`) and the *training source fingerprint* a new run records in its `result.json`.
  The training source fingerprint hashes every `xmr_core` source and data file except those that only run
  the book, report results, manage the cache or choose which runs to ask for (`NOT_TRAINING`): a run whose
  fingerprint differs from this code's may have been computed by other code, even under the same run key (the
  key hashes the configs and the data, not the code). Runs from before the field have none ("unknown").
  `source_fingerprint_at(commit)` recomputes it at a run's recorded commit under today's rule (`code_problem`).
- The run log: the book runner names a file in `XMR_RUN_LOG` for each notebook it executes
  (`book/_build/<profile>/<chapter>/<notebook>.runs.jsonl`, `log_path`); `fit` appends one line per run it
  trains or loads (`log_run`), and the frozen inputs whose bytes enter the run keys append theirs
  (`xmr_core.io.log_input`: the pretrained trunk and its grid features, the region encoder and its features; it
  sits in `io` so that the data and encoders name them without importing the runs layer). One JSON object a line,
  appended with a single `write` (`io.append_json_line`: processes sharing the log never interleave a line). A
  chapter's logs are listed in the order the book runs its notebooks (`notebook_rank`).
  `xmr runs pack` packs what the logs name; `xmr book run` prints each notebook's trained / loaded counts.
- Batches: the runs asked for in one `plan.fit_many` call are independent of each other, so they may train side
  by side; `log_run` records the batch (`runs.trace.batch_id`: numbered per process, None for a lone `fit`), from
  which `xmr runs ls` derives the book's cold wall time at W workers as `xmr book plan` does from its trace.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

from xmr_core import sources
from xmr_core.config import project_root
from xmr_core.io import append_run_log, read_json_lines
from xmr_core.runs import trace as plantrace

NOTEBOOK_ORDER = ("train", "ablate", "visualise")  # a chapter's notebooks in the order the book runs them
CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout this package runs from (its git repository)
# xmr_core paths (files, or folders ending in "/") that do not change what a run computes: the book runner, reports,
# the cache, the experiment layer that only chooses which runs to ask for (the chapters, the compared methods and
# recipes, the tuning protocol), and the run records (a finished run scored once, `records`). What a run is asked for
# enters its key: the method config, the model's initial state, the train config and the data; what computes it from
# there (training, methods, encoders, data, metrics) is the training source.
NOT_TRAINING = ("book/", "viz.py", "claims.py", "grounding.py", "ceiling.py", "sources.py", "io.py", "liveness.py",
                "records.py", "run_evaluation.py", "query_values.py", "record_evidence.py", "runs/record.py",
                "runs/fits.py", "runs/log.py", "runs/archive.py", "runs/identity.py", "runs/cache.py", "runs/executors.py",
                "runs/trace.py", "runs/plan.py", "runs/tuning.py", "chapters/", "experiment/", "bench/", "paper_values/")


def is_training(rel: str) -> bool:
    """Whether the package path `rel` (e.g. "methods/vse.py") is a training source (outside `NOT_TRAINING`)."""
    return Path(rel).suffix in sources.SOURCE_SUFFIXES and not any(
        rel == n or (n.endswith("/") and rel.startswith(n)) for n in NOT_TRAINING)


@functools.cache
def source_fingerprint() -> str:
    """`sources.fingerprint` of the training sources of `xmr_core` (`sources.package_files` that `is_training`),
    read once a process."""
    pkg = CHECKOUT / sources.PACKAGE
    return sources.fingerprint([p for p in sources.package_files(CHECKOUT)
                                if is_training(p.relative_to(pkg).as_posix())], CHECKOUT)


@functools.cache
def training_blobs_at(commit: str) -> dict[str, str] | None:
    """{package path: git blob id} of the training sources at this checkout's git `commit`, under this code's
    `NOT_TRAINING` (listed from git, the working tree untouched); None when git or the commit is not available
    (e.g. a shallow clone)."""
    try:
        listing = subprocess.run(["git", "ls-tree", "-r", "-z", commit, "--", sources.PACKAGE], cwd=CHECKOUT,
                                 capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    blobs: dict[str, str] = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        rel = path.removeprefix(f"{sources.PACKAGE}/")
        if meta.split()[1] == "blob" and is_training(rel):
            blobs[rel] = meta.split()[2]
    return blobs


def read_blob(blob: str) -> bytes:
    """The bytes of git blob `blob` of this checkout."""
    return subprocess.run(["git", "cat-file", "blob", blob], cwd=CHECKOUT, capture_output=True, check=True).stdout


@functools.cache
def source_fingerprint_at(commit: str) -> str | None:
    """The training source fingerprint of this checkout's git `commit`, under this code's `NOT_TRAINING`
    (`training_blobs_at`); None when git or the commit is not available (e.g. a shallow clone). A run trained at a
    clean commit is of this code when this equals `source_fingerprint()`, even if it recorded another fingerprint
    (one taken under an older, wider `NOT_TRAINING`)."""
    blobs = training_blobs_at(commit)
    if blobs is None:
        return None
    return sources.fingerprint_contents((PurePosixPath(sources.PACKAGE, rel), lambda blob=blob: read_blob(blob))
                                        for rel, blob in blobs.items())


def code_problem(commit: str | None, source: str | None) -> str:
    """'' when a run that records `commit` and training `source` was trained by this code's training sources, else
    why not: the recorded fingerprint is this code's, or the recorded commit is clean and its training sources,
    read from git under today's `NOT_TRAINING`, are this code's."""
    if not source:
        return "records no training source (trained before runs recorded it)"
    here = source_fingerprint()
    if source == here or (commit and not commit.endswith("+dirty") and source_fingerprint_at(commit) == here):
        return ""
    return f"was trained by other code (training source {source[:12]} at commit {commit}, this code {here[:12]})"


def git_commit(root: Path | None = None) -> str | None:
    """HEAD's hash with `+dirty` when tracked files outside `results/` differ from it; None outside a git
    checkout. `results/` is left out because it is this run's output: a run rewriting it is not dirty."""
    root = root or project_root()
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
            cwd=root, capture_output=True, text=True, check=False,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def trained_at() -> dict[str, str | None]:
    """What a new run records about its code: the git commit (`+dirty` with local changes; None outside a
    checkout) and the training source fingerprint."""
    return {"commit": git_commit(), "source": source_fingerprint()}


def notebook_rank(stem: str) -> tuple[int, str]:
    """A chapter's notebook's place in running order: train, ablate, visualise, then any other by name."""
    return NOTEBOOK_ORDER.index(stem) if stem in NOTEBOOK_ORDER else len(NOTEBOOK_ORDER), stem


def log_path(notebook_output: Path) -> Path:
    """The run log of an executed notebook: `<notebook>.runs.jsonl` beside it."""
    return notebook_output.with_name(f"{notebook_output.stem}.runs.jsonl")


def log_run(run_dir: Path, key: str, method: str, seed: int, trained: bool) -> None:
    """Append a run `fit` trained (`trained`) or loaded from its finished run directory to the run log, with the
    batch it was asked for in (`runs.trace.batch_id`)."""
    append_run_log({"kind": "run", "name": Path(run_dir).name, "run_dir": str(Path(run_dir).resolve()), "key": key,
             "method": method, "seed": seed, "trained": trained, "batch": plantrace.batch_id()})


def log_summary(name: str, key: str, method: str, seed: int) -> None:
    """Append a run read from its fit summary, not trained nor loaded (no weights, `runs.fits`), to the run log,
    with the batch it was asked for in."""
    append_run_log({"kind": "summary", "name": name, "key": key, "method": method, "seed": seed,
                    "batch": plantrace.batch_id()})


def read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a run log; a line that is not a JSON object is an error naming the file and line."""
    return read_json_lines(path, lambda record: record.get("kind") in ("run", "summary", "input"), "a run-log record")


def run_batches(path: Path) -> dict[str, int | None]:
    """Every run a notebook's run log names (first-named first) with the batch it was asked for in: the first of
    its records that has one (a worker's record of training a run has none; the notebook's loading it does), else
    None (a lone `fit`, or a log written before batches were recorded)."""
    batches: dict[str, int | None] = {}
    for record in read_log(path):
        if record["kind"] == "run" and batches.get(record["name"]) is None:
            batches[record["name"]] = record.get("batch")
    return batches


def describe(path: Path) -> str:
    """', trained N runs, loaded M' for a notebook's run log (distinct runs; '' when it has none), and ', read K
    from fit summaries' where runs stood in by their summaries (`runs.fits`: no weights)."""
    if not path.is_file():
        return ""
    records = read_log(path)
    runs = [r for r in records if r["kind"] == "run"]
    trained = {r["name"] for r in runs if r["trained"]}
    loaded = {r["name"] for r in runs} - trained
    summarised = {r["name"] for r in records if r["kind"] == "summary"} - trained - loaded
    return (f", trained {len(trained)} run{'s' * (len(trained) != 1)}, loaded {len(loaded)}"
            + (f", read {len(summarised)} from fit summaries" if summarised else ""))
