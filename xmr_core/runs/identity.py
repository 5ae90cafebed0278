"""A run's code identity: the training sources of its method, here and at the commit it was trained at.

`xmr runs pack` and `unpack` (`xmr_core.runs.archive`) ask `code_problem` of every run. `runs.log`'s fingerprint
covers every training source, so an edit to one method's file (a faster HREM) would make every run "trained by other code",
the PCME chapter's too, which that file never ran. A run of method M is computed by the training sources outside
the method files (`registry.METHOD_MODULES`: the training loop, losses, encoders, data, metrics, the registry
and the base classes) and the method files those and M's own file import, transitively (HREM's imports VSE's
hinge schedule; no method file imports HREM's); the registry loads every method file by name, but only M's code
runs, so that import is not followed (`method_files`). A run is of this code when its recorded fingerprint is
this code's, or when it was trained at a commit (clean, or `+dirty` with the commit's own fingerprint recorded:
the uncommitted changes touched no training source) whose training sources of M are this code's.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from xmr_core import sources
from xmr_core.methods.registry import METHOD_MODULES, method_entry
from xmr_core.runs import log as runlog

METHOD_FILES = frozenset(f"methods/{m}.py" for m in METHOD_MODULES)


def method_file(method: str) -> str:
    """The package path of the file that defines the registered method `method` (e.g. "methods/hrem.py")."""
    module = method_entry(method).model.__module__
    return module.removeprefix(f"{sources.PACKAGE}.").replace(".", "/") + ".py"


@functools.cache
def _imports(rel: str, content: bytes) -> frozenset[str]:
    """The dotted names of the modules the package file `rel` with bytes `content` imports."""
    module = f"{sources.PACKAGE}." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return frozenset(sources.imports_in(PurePosixPath(sources.PACKAGE, rel), content.decode("utf-8"), module,
                                        rel.endswith("__init__.py")))


def _module_rel(name: str, files: Mapping[str, bytes]) -> str | None:
    """`xmr_core.a.b` -> "a/b.py" or "a/b/__init__.py" if among `files`, else None."""
    if not name.startswith(f"{sources.PACKAGE}."):
        return None
    base = name.removeprefix(f"{sources.PACKAGE}.").replace(".", "/")
    return next((rel for rel in (f"{base}.py", f"{base}/__init__.py") if rel in files), None)


def method_files(method: str, files: Mapping[str, bytes]) -> set[str]:
    """The training sources of a run of `method` among `files` ({package path: bytes}, every training source of
    one checkout or commit): every file but the method files, then the method files that those or `method`'s own
    file import, transitively. An error names a method whose file is not in `files`."""
    own = method_file(method)
    if own not in files:
        raise KeyError(f"method {method!r}: its file {sources.PACKAGE}/{own} is not among the training sources")
    chosen = {rel for rel in files if rel not in METHOD_FILES} | {own}
    pending = [rel for rel in chosen if rel.endswith(".py")]
    while pending:
        rel = pending.pop()
        for name in _imports(rel, files[rel]):
            found = _module_rel(name, files)
            if found is not None and found not in chosen:
                chosen.add(found)
                pending.append(found)
    return chosen


def _fingerprint(files: Mapping[str, bytes], rels: Iterable[str]) -> str:
    """`sources.fingerprint_contents` of the package paths `rels` among `files` (all of them: runlog's training
    source fingerprint; `method_files`: a method's)."""
    return sources.fingerprint_contents((PurePosixPath(sources.PACKAGE, rel), lambda rel=rel: files[rel])
                                        for rel in rels)


@functools.cache
def _files_here() -> dict[str, bytes]:
    """{package path: bytes} of this checkout's training sources, read once a process."""
    pkg = runlog.CHECKOUT / sources.PACKAGE
    return {rel: p.read_bytes() for p in sources.package_files(runlog.CHECKOUT)
            if runlog.is_training(rel := p.relative_to(pkg).as_posix())}


@functools.cache
def _files_at(commit: str) -> dict[str, bytes] | None:
    """{package path: bytes} of the training sources at git `commit` of this checkout (`runs.log.training_blobs_at`:
    read from git, the working tree untouched, under today's `runs.log.NOT_TRAINING`); None when git or the commit is
    not available."""
    blobs = runlog.training_blobs_at(commit)
    if blobs is None:
        return None
    try:
        return {rel: runlog.read_blob(blob) for rel, blob in blobs.items()}
    except (OSError, subprocess.CalledProcessError):
        return None


@functools.cache
def method_fingerprint(method: str) -> str:
    """The fingerprint of `method`'s training sources in this checkout (`method_files`)."""
    files = _files_here()
    return _fingerprint(files, method_files(method, files))


@functools.cache
def method_fingerprint_at(method: str, commit: str) -> str | None:
    """`method_fingerprint` at git `commit` of this checkout, under today's rule; None when git or the commit is
    not available, or the commit has no file for `method`."""
    files = _files_at(commit)
    try:
        return None if files is None else _fingerprint(files, method_files(method, files))
    except KeyError:
        return None


def code_problem(method: str, commit: str | None, source: str | None) -> str:
    """'' when a run of `method` that records `commit` and training `source` was computed by this code, else why
    not: the recorded training source is this code's (`runs.log.code_problem`), or the run's commit is clean, or
    `+dirty` with the commit's own training source recorded, and `method`'s training sources there are this
    code's (`method_fingerprint_at`). Each commit's sources are read from git once (`_files_at`)."""
    if not source or not commit or source == runlog.source_fingerprint():
        return runlog.code_problem(commit, source)  # no git read on these paths
    base = commit.removesuffix("+dirty")
    files = _files_at(base)
    here = method_fingerprint(method)
    if files is not None and (base == commit or _fingerprint(files, files) == source) \
            and method_fingerprint_at(method, base) == here:
        return ""  # a dirty tree whose recorded fingerprint is its commit's: its changes touched no training source
    return (f"was trained by other code ({method}'s training sources at commit {commit} are not this code's "
            f"{here[:12]}; training source {source[:12]})")
