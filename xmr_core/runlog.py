"""Where runs come from and who uses them: the code a run was trained at, and each notebook's run log.

- `trained_at()`: the commit and the *training source fingerprint* a new run records in its `result.json`.
  The training source fingerprint hashes every `xmr_core` source and data file except those that only run
  the book, report results, manage the cache or choose which runs to ask for (`NOT_TRAINING`): a run whose
  fingerprint differs from this code's may have been computed by other code, even under the same run key (the
  key hashes the configs and the data, not the code). Runs from before the field have none ("unknown").
  `source_fingerprint_at(commit)` recomputes it at a run's recorded commit under today's rule (`code_problem`).
- The run log: the book runner names a file in `XMR_RUN_LOG` for each notebook it executes
  (`book/_build/<profile>/<chapter>/<notebook>.runs.jsonl`, `log_path`); `fit` appends one line per run it
  trains or loads (`log_run`), and the frozen inputs whose bytes enter the run keys append theirs
  (`log_input`: the pretrained trunk and its grid features, the region encoder and its features). One JSON
  object a line, appended with a single `write` (so processes sharing the log never interleave a line).
  `xmr runs pack` packs what the logs name; `xmr book run` prints each notebook's trained / loaded counts.
- Batches: the runs asked for in one `runplan.fit_many` call are independent of each other, so they may train side
  by side; `log_run` records the batch (`plantrace.batch_id`: numbered per process, None for a lone `fit`), from
  which `xmr runs ls` derives the book's cold wall time at W workers as `xmr book plan` does from its trace.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

from xmr_core import plantrace, sources
from xmr_core.io import read_json_lines

RUN_LOG_ENV = "XMR_RUN_LOG"
CHECKOUT = Path(__file__).resolve().parent.parent  # the checkout this package runs from (its git repository)
# xmr_core paths (files, or folders ending in "/") that do not change what a run computes: the book runner, reports,
# the cache, and the experiment layer that only chooses which runs to ask for (the chapters, the compared methods and
# recipes, the tuning protocol). What a run is asked for enters its key: the method config, the model's initial
# state, the train config and the data; what computes it from there (training, methods, encoders, data, metrics)
# is the training source.
NOT_TRAINING = ("book.py", "book_html.py", "book_static.py", "bookplan.py", "cli.py", "results.py", "viz.py",
                "claims.py", "grounding.py", "verdicts.py", "ceiling.py", "staleness.py", "sources.py", "runlog.py",
                "runarchive.py", "runidentity.py", "results_diff.py", "runcache.py", "io.py", "liveness.py", "executors.py",
                "plantrace.py", "runplan.py", "runrequest.py", "tuning.py", "chapters/", "experiment/", "bench/",
                "paper_values/")


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


def trained_at() -> dict[str, str | None]:
    """What a new run records about its code: the git commit (`+dirty` with local changes; None outside a
    checkout) and the training source fingerprint."""
    from xmr_core.results import git_commit

    return {"commit": git_commit(), "source": source_fingerprint()}


def log_path(notebook_output: Path) -> Path:
    """The run log of an executed notebook: `<notebook>.runs.jsonl` beside it."""
    return notebook_output.with_name(f"{notebook_output.stem}.runs.jsonl")


def _append(record: dict[str, Any]) -> None:
    target = os.environ.get(RUN_LOG_ENV)
    if not target:
        return
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def log_run(run_dir: Path, key: str, method: str, seed: int, trained: bool) -> None:
    """Append a run `fit` trained (`trained`) or loaded from its finished run directory to the run log, with the
    batch it was asked for in (`plantrace.batch_id`)."""
    _append({"kind": "run", "name": Path(run_dir).name, "run_dir": str(Path(run_dir).resolve()), "key": key,
             "method": method, "seed": seed, "trained": trained, "batch": plantrace.batch_id()})


def log_input(folder: Path, files: list[str] | None = None) -> None:
    """Append a frozen input whose bytes enter run keys: `files` of `folder`, in the order they are to be
    restored (a completion marker last), or the whole folder (None: complete as a whole)."""
    _append({"kind": "input", "dir": str(Path(folder).resolve()), "files": files})


def read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a run log; a line that is not a JSON object is an error naming the file and line."""
    return read_json_lines(path, lambda record: record.get("kind") in ("run", "input"), "a run-log record")


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
    """', trained N runs, loaded M' for a notebook's run log (distinct runs; '' when it has none)."""
    if not path.is_file():
        return ""
    runs = [r for r in read_log(path) if r["kind"] == "run"]
    trained = {r["name"] for r in runs if r["trained"]}
    loaded = {r["name"] for r in runs} - trained
    return f", trained {len(trained)} run{'s' * (len(trained) != 1)}, loaded {len(loaded)}"
