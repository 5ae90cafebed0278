"""Where runs come from and who uses them: the code a run was trained at, and each notebook's run log.

- `trained_at()`: the commit and the *training source fingerprint* a new run records in its `result.json`.
  The training source fingerprint hashes every `xmr_core` source and data file except those that only run
  the book, report results or manage the cache (`NOT_TRAINING`): a run whose fingerprint differs from this
  code's may have been computed by other code, even under the same run key (the key hashes the configs and
  the data, not the code). Runs from before the field have none ("unknown").
- The run log: the book runner names a file in `XMR_RUN_LOG` for each notebook it executes
  (`book/_build/<profile>/<chapter>/<notebook>.runs.jsonl`, `log_path`); `fit` appends one line per run it
  trains or loads (`log_run`), and the frozen inputs whose bytes enter the run keys append theirs
  (`log_input`: the pretrained trunk and its grid features, the region encoder and its features). One JSON
  object a line, appended with a single `write` (so processes sharing the log never interleave a line).
  `xmr runs pack` packs what the logs name; `xmr book run` prints each notebook's trained / loaded counts.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from xmr_core import sources
from xmr_core.io import read_json_lines

RUN_LOG_ENV = "XMR_RUN_LOG"
# xmr_core paths (files, or folders ending in "/") that do not change what a run computes
NOT_TRAINING = ("book.py", "book_html.py", "bookplan.py", "cli.py", "results.py", "viz.py", "claims.py", "grounding.py",
                "runlog.py", "runarchive.py", "runcache.py", "io.py", "liveness.py", "executors.py", "plantrace.py",
                "runplan.py", "runrequest.py", "bench/", "paper_values/")


@functools.cache
def source_fingerprint() -> str:
    """`sources.fingerprint` of the training sources of `xmr_core` (`sources.package_files` outside
    `NOT_TRAINING`), read once a process."""
    root = Path(__file__).resolve().parent.parent
    pkg = root / sources.PACKAGE

    def training(path: Path) -> bool:
        rel = path.relative_to(pkg).as_posix()
        return not any(rel == n or (n.endswith("/") and rel.startswith(n)) for n in NOT_TRAINING)

    return sources.fingerprint([p for p in sources.package_files(root) if training(p)], root)


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
    """Append a run `fit` trained (`trained`) or loaded from its finished run directory to the run log."""
    _append({"kind": "run", "name": Path(run_dir).name, "run_dir": str(Path(run_dir).resolve()), "key": key,
             "method": method, "seed": seed, "trained": trained})


def log_input(folder: Path, files: list[str] | None = None) -> None:
    """Append a frozen input whose bytes enter run keys: `files` of `folder`, in the order they are to be
    restored (a completion marker last), or the whole folder (None: complete as a whole)."""
    _append({"kind": "input", "dir": str(Path(folder).resolve()), "files": files})


def read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a run log; a line that is not a JSON object is an error naming the file and line."""
    return read_json_lines(path, lambda record: record.get("kind") in ("run", "input"), "a run-log record")


def describe(path: Path) -> str:
    """', trained N runs, loaded M' for a notebook's run log (distinct runs; '' when it has none)."""
    if not path.is_file():
        return ""
    runs = [r for r in read_log(path) if r["kind"] == "run"]
    trained = {r["name"] for r in runs if r["trained"]}
    loaded = {r["name"] for r in runs} - trained
    return f", trained {len(trained)} run{'s' * (len(trained) != 1)}, loaded {len(loaded)}"
