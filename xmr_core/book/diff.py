"""`xmr results diff`: whether re-executed results are the committed ones, and what differs where not.

A result's two versions (a table's `.md` and `.csv`, a figure's `.png`, a text's `.md`, and the `.json`
provenance of each) are the same when

- a figure has the same pixels (PNG metadata ignored);
- a table has the same cells but in the columns that describe the execution, not the result
  (`EXECUTION_COLUMNS`: whether a run was trained or loaded, seconds of the notebook, when it was written);
- its provenance is the same but for where, when and with which code and versions it was executed
  (`EXECUTION_META`; `xmr results check` judges the code);
- any other file has the same bytes.

Everything else is reported, file by file, with the first differing lines or cells. A timing a result
measures (DVSE's re-ranking seconds, the benchmark's load and generation times) differs between executions by
nature: it is reported, not hidden. `xmr book run` ends with one such comparison per chapter folder it wrote,
against the commit checked out (`HEAD`).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from xmr_core.book.staleness import git

EXECUTION_COLUMNS = ("cached", "wall s", "written (UTC)")
EXECUTION_META = ("wall_s", "created_utc", "git_commit", "xmr_version", "python", "torch", "numpy", "torch_threads",
                  "notebook_code", "xmr_core_sources", "xmr_core_fingerprint", "cell")
SHOWN = 3  # differences shown per file
_WIDTH = 160  # characters of a differing line shown
_CELL_SEP = re.compile(r"(?<!\\)\|")


class DiffError(RuntimeError):
    """A comparison that cannot be made (no git checkout, an unknown revision); one line."""


def differences(name: str, old: bytes, new: bytes) -> list[str]:
    """What differs between two versions of the result file `name` (its suffix says how to read them); [] when
    they are the same in the sense of this module."""
    if old == new:
        return []
    suffix = Path(name).suffix
    try:
        if suffix == ".png":
            return _png(old, new)
        if suffix == ".json":
            return _json(old, new)
        if suffix == ".csv":
            return _csv(old, new)
        if suffix == ".md":
            return _markdown(old.decode("utf-8"), new.decode("utf-8"))
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as err:
        return [f"cannot be read as {suffix} ({type(err).__name__}: {err})"]
    return ["the bytes differ"]


def _png(old: bytes, new: bytes) -> list[str]:
    a, b = (np.asarray(Image.open(io.BytesIO(x)).convert("RGBA")) for x in (old, new))
    if a.shape != b.shape:
        return [f"size {a.shape[1]}x{a.shape[0]} -> {b.shape[1]}x{b.shape[0]}"]
    changed = int((a != b).any(axis=-1).sum())
    return [f"{changed} of {a.shape[0] * a.shape[1]} pixels differ"] if changed else []


def _what(meta: dict) -> dict:
    """Provenance without what describes the execution (`EXECUTION_META`, the results folder written to)."""
    out = {k: v for k, v in meta.items() if k not in EXECUTION_META}
    if isinstance(out.get("parameters"), dict):
        out["parameters"] = {k: v for k, v in out["parameters"].items() if k != "RESULTS_DIR"}
    return out


def _json(old: bytes, new: bytes) -> list[str]:
    a, b = json.loads(old), json.loads(new)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else ["the values differ"]
    a, b = _what(a), _what(b)
    return [f"{k}: {_short(a.get(k, '(absent)'))} -> {_short(b.get(k, '(absent)'))}"
            for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]


def _csv(old: bytes, new: bytes) -> list[str]:
    a, b = (pd.read_csv(io.BytesIO(x), dtype=str, keep_default_na=False) for x in (old, new))
    if list(a.columns) != list(b.columns):
        return [f"columns {list(a.columns)} -> {list(b.columns)}"]
    if len(a) != len(b):
        return [f"{len(a)} rows -> {len(b)} rows"]
    cols = [c for c in a.columns if c not in EXECUTION_COLUMNS]
    out = []
    for col in cols:
        for row in np.flatnonzero((a[col] != b[col]).to_numpy()):
            out.append(f"row {row + 1}, {col}: {_short(a[col].iat[row])} -> {_short(b[col].iat[row])}")
    return out


def table_cells(line: str) -> list[str]:
    """A markdown table row's cells, stripped; split on unescaped pipes (the writers escape a cell's own as `\\|`)."""
    return [c.strip() for c in _CELL_SEP.split(line.strip().strip("|"))]


def _rows(text: str) -> list[str]:
    """A markdown page's lines; a table row as its cells joined by ' | ', without the `EXECUTION_COLUMNS`."""
    out: list[str] = []
    keep: list[int] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            keep = None
            out.append(line)
            continue
        cells = table_cells(line)
        if keep is None:  # a table's header row
            keep = [i for i, c in enumerate(cells) if c not in EXECUTION_COLUMNS]
        out.append(" | ".join(cells[i] for i in keep if i < len(cells)))
    return out


def _markdown(old: str, new: str) -> list[str]:
    a, b = _rows(old), _rows(new)
    out = [f"line {i + 1}: {_short(x)} -> {_short(y)}" for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b):
        out.append(f"{len(a)} lines -> {len(b)} lines")
    return out


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return repr(text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "...")


def compare_trees(old: Path, new: Path) -> dict[str, list[str]]:
    """Every file under `old` or `new` (relative posix path) with its differences; a file on one side only
    is reported as such."""
    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    report = {}
    for rel in sorted(files(old) | files(new)):
        a, b = old / rel, new / rel
        if not a.is_file():
            report[rel] = [f"only in {new}"]
        elif not b.is_file():
            report[rel] = [f"only in {old}"]
        else:
            report[rel] = differences(rel, a.read_bytes(), b.read_bytes())
    return report


def committed_files(root: Path, folder: str, rev: str = "HEAD") -> list[str]:
    """The files under `folder` (relative to `root`, posix) at `rev`; [] when `root` is no git checkout or
    nothing there is committed."""
    listed = git(root, "ls-tree", "-r", "--name-only", rev, "--", folder, text=False)
    return sorted(listed.stdout.decode().split("\n")[:-1]) if listed.returncode == 0 else []


def compare_committed(root: Path, folders: Sequence[str], rev: str = "HEAD") -> dict[str, list[str]]:
    """The files under each of `folders` (relative to `root`, e.g. "results/pcme") in the working tree
    against `rev`: {path: differences}; "not in <rev>" for a new file, "missing" for a committed one gone."""
    if git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", text=False).returncode != 0:
        raise DiffError(f"{root}: no commit {rev!r} to compare with (not a git checkout, or an unknown revision)")
    report: dict[str, list[str]] = {}
    for folder in folders:
        committed = set(committed_files(root, folder, rev))
        present = {p.relative_to(root).as_posix() for p in (root / folder).rglob("*") if p.is_file()}
        for rel in sorted(committed | present):
            if rel not in committed:
                report[rel] = [f"not in {rev}"]
            elif rel not in present:
                report[rel] = ["missing: committed, not written"]
            else:
                shown = git(root, "show", f"{rev}:{rel}", text=False)
                report[rel] = differences(rel, shown.stdout, (root / rel).read_bytes())
    return report


def print_diff(report: dict[str, list[str]], rev: str, echo: Callable[[str], None] = print) -> bool:
    """Each differing file with its first `SHOWN` differences, then the count; True when none differs."""
    differ = {rel: found for rel, found in report.items() if found}
    for rel, found in differ.items():
        echo(f"[DIFF] {rel}: " + "; ".join(found[:SHOWN]) + (f"; and {len(found) - SHOWN} more" if len(found) > SHOWN
                                                              else ""))
    echo(f"{len(report)} files against {rev}: {len(report) - len(differ)} the same, {len(differ)} differ")
    return not differ
