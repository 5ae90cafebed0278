"""`xmr results check`: which committed results were computed from inputs that have changed since.

A result's inputs are its notebook's code cells, the `xmr_core` files the notebook imports
(`xmr_core.sources`) and the results of other notebooks it read (`reads`, `book.results.read_result`: each file's
digest as read, None where it was absent; compared with the file now, `changed_reads`). A result whose
provenance records their digests (`xmr_core_sources`,
`notebook_code`) is compared with the working tree directly, with no git needed. An older result records
only the commit it was written at (`git_commit`); its inputs are then compared, with git, between that
commit and the working tree. A result is

- `fresh`: none of its inputs changed;
- `stale`: some did (the files are named);
- `unknown`: the check cannot tell: no notebook in its provenance, a commit written from a dirty tree
  (`+dirty`) with no digests, or a commit this clone does not have (a shallow clone: `git fetch --unshallow`).

Stale and unknown results both fail the check: neither can be vouched for.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xmr_core.book.results import own_result_files
from xmr_core.sources import code_digest, digest_bytes, file_digests, notebook_sources

KINDS = {"table", "figure", "text", "data"}  # `book.results`' writers: write_table, write_figure, write_text, write_data


@dataclass(frozen=True)
class Verdict:
    status: str  # "fresh" | "stale" | "unknown"
    changed: tuple[str, ...] = ()  # inputs that changed (paths; the notebook's own path = its code cells)
    reason: str = ""  # for "unknown": why the check cannot tell

    def describe(self) -> str:
        if self.status == "stale":
            return "changed since: " + ", ".join(self.changed)
        return self.reason


@dataclass
class Result:
    key: str  # e.g. "pcme/table1"
    meta: dict[str, Any]
    verdict: Verdict


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.verdict.status == status for r in self.results)

    @property
    def ok(self) -> bool:
        return self.count("stale") == 0 and self.count("unknown") == 0

    def by_key(self) -> dict[str, Result]:
        return {r.key: r for r in self.results}


def result_metas(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """(key, provenance) of every result under `results` (`<chapter>/<name>.json` of a table, figure, text, or a
    JSON result that holds its own provenance), sorted by key; not those of the other profiles' folders nested in it (`results.own_result_files`)."""
    out = []
    for path in own_result_files(results):
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a provenance record ({exc})") from None
        if isinstance(meta, dict) and meta.get("kind") in KINDS:
            out.append((path.relative_to(results).with_suffix("").as_posix(), meta))
    return out


def changed_reads(meta: dict[str, Any], results: Path, root: Path) -> list[str]:
    """The results `meta`'s notebook read before writing it (`reads`: key under `results` -> digest, None where
    absent) that differ from what it read: changed, removed or since written; as paths from `root` where under it."""
    changed = []
    for key, recorded in (meta.get("reads") or {}).items():
        path = results / key
        if (digest_bytes(path.read_bytes()) if path.is_file() else None) != recorded:
            changed.append(path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))
    return changed


def notebook_reads_changed(notebook: str, results: Path, root: Path) -> list[str]:
    """`changed_reads` of every result under `results` that `notebook` (e.g. "book/01_pcme/visualise.py") wrote,
    distinct, in order: what its last run read that has changed since."""
    changed = [p for _, meta in result_metas(results) if meta.get("notebook") == notebook
               for p in changed_reads(meta, results, root)]
    return list(dict.fromkeys(changed))


def git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    """`git ARGS` run in `root`, its output captured (str, or bytes with `text=False`); never raises on failure:
    the caller reads `returncode`."""
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, check=False)


class Checker:
    """Judges results under `results` against the working tree under `root`; one git comparison per notebook
    and commit."""

    def __init__(self, root: Path, results: Path) -> None:
        self.root = root
        self.results = results
        self._sources: dict[str, list[Path]] = {}
        self._code: dict[str, str] = {}
        self._by_commit: dict[tuple[str, str], Verdict] = {}

    def sources(self, notebook: str) -> list[Path]:
        if notebook not in self._sources:
            self._sources[notebook] = notebook_sources(self.root / notebook, self.root)
        return self._sources[notebook]

    def code(self, notebook: str) -> str:
        """The digest of the notebook's code cells in the working tree."""
        if notebook not in self._code:
            self._code[notebook] = code_digest((self.root / notebook).read_text(encoding="utf-8"))
        return self._code[notebook]

    def judge(self, meta: dict[str, Any]) -> Verdict:
        """The verdict on its code and imported sources, stale as well where a result it read has changed."""
        verdict = self._judge_code(meta)
        reads = changed_reads(meta, self.results, self.root)
        return Verdict("stale", (*verdict.changed, *reads)) if reads else verdict

    def _judge_code(self, meta: dict[str, Any]) -> Verdict:
        notebook = meta.get("notebook")
        if not notebook:
            return Verdict("unknown", reason="its provenance names no notebook (not written by `xmr book run`)")
        path = self.root / notebook
        if not path.is_file():
            return Verdict("stale", (notebook,), f"notebook {notebook} no longer exists")
        if isinstance(meta.get("xmr_core_sources"), dict) and meta.get("notebook_code"):
            return self._by_digests(notebook, meta)
        commit = meta.get("git_commit") or ""
        if not commit:
            return Verdict("unknown", reason="no commit and no source digests in its provenance")
        if commit.endswith("+dirty"):
            return Verdict("unknown", reason=f"written from uncommitted changes on {commit[:12]}, with no source digests")
        if (commit, notebook) not in self._by_commit:
            self._by_commit[(commit, notebook)] = self._by_git(notebook, commit)
        return self._by_commit[(commit, notebook)]

    def _by_digests(self, notebook: str, meta: dict[str, Any]) -> Verdict:
        recorded: dict[str, str] = meta["xmr_core_sources"]
        current = file_digests(self.sources(notebook), self.root)
        changed = sorted(p for p in set(recorded) | set(current) if recorded.get(p) != current.get(p))
        if meta["notebook_code"] != self.code(notebook):
            changed.insert(0, notebook)
        return Verdict("stale", tuple(changed)) if changed else Verdict("fresh")

    def _by_git(self, notebook: str, commit: str) -> Verdict:
        if git(self.root, "rev-parse", "--git-dir").returncode != 0:
            return Verdict("unknown", reason=f"written at commit {commit[:12]}, and {self.root} is not a git checkout")
        if git(self.root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            return Verdict("unknown", reason=f"commit {commit[:12]} is not in this clone's history "
                                             "(a shallow clone? `git fetch --unshallow`)")
        paths = [p.relative_to(self.root).as_posix() for p in self.sources(notebook)]
        diff = git(self.root, "diff", "--name-only", commit, "--", *paths)
        if diff.returncode != 0:
            return Verdict("unknown", reason=f"git diff against {commit[:12]} failed: {diff.stderr.strip()[:200]}")
        changed = sorted(diff.stdout.split())
        before = git(self.root, "show", f"{commit}:{notebook}")
        if before.returncode != 0 or code_digest(before.stdout) != self.code(notebook):
            changed.insert(0, notebook)
        return Verdict("stale", tuple(changed)) if changed else Verdict("fresh")


def check_results(results: Path, root: Path) -> Report:
    """Every result under `results` with its verdict against the working tree under `root`."""
    checker = Checker(root, results)
    return Report([Result(key, meta, checker.judge(meta)) for key, meta in result_metas(results)])


def print_report(report: Report, echo: Callable[[str], None] = print) -> None:
    """One line per notebook and commit (its results' count, status and why), stale and unknown first,
    then the closing count."""
    groups: dict[tuple[str, str, Verdict], list[str]] = {}
    for r in report.results:
        label = (r.meta.get("notebook") or "(no notebook)", (r.meta.get("git_commit") or "-")[:12], r.verdict)
        groups.setdefault(label, []).append(r.key)
    order = {"stale": 0, "unknown": 1, "fresh": 2}
    for (notebook, commit, verdict), keys in sorted(groups.items(), key=lambda g: (order[g[0][2].status], g[0][:2])):
        tag = {"stale": "STALE", "unknown": "UNKNOWN", "fresh": "fresh"}[verdict.status]
        why = f": {verdict.describe()}" if verdict.status != "fresh" else ""
        echo(f"[{tag}] {notebook} at {commit}, {len(keys)} result(s){why}")
        if verdict.status != "fresh":
            echo("        " + ", ".join(keys))
    echo(f"{len(report.results)} results: {report.count('fresh')} fresh, {report.count('stale')} stale, "
         f"{report.count('unknown')} unknown")
