"""What a notebook's results are computed from: its code cells and the `xmr_core` sources it imports.

`notebook_sources` follows the notebook's imports of `xmr_core` statically (`ast`, no import is executed),
transitively through the package: every module imported anywhere in a module (function bodies included,
so a lazy import counts), the `__init__.py` of every package on the way, every module of a package that a
module reached imports by name at run time (`BY_NAME`: the method registry loads every method file), and
every data file of the package (`.csv`, `.json`: the paper values), which a module may read at run time.
`file_digests` hashes them one by one (so a change names its file) and `fingerprint` hashes a set of files
as a whole (the runner's skip rule uses it over a notebook's sources).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath

PACKAGE = "xmr_core"
DATA_SUFFIXES = {".csv", ".json"}
SOURCE_SUFFIXES = {".py"} | DATA_SUFFIXES
BY_NAME: dict[str, str] = {  # module -> the package whose modules it imports by name (`importlib.import_module`)
    "xmr_core.methods.registry": "xmr_core.methods",
    "xmr_core.bench.claims": "xmr_core.chapters",
    "xmr_core.bench.__main__": "xmr_core.bench",
}


def package_files(root: Path) -> list[Path]:
    """Every source and data file of the package under `root`."""
    pkg = root / PACKAGE
    return sorted(p for p in pkg.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def fingerprint(files: Iterable[Path], base: Path) -> str:
    """sha256 over the files (sorted), each as its path relative to `base` and its bytes."""
    return fingerprint_contents((path.relative_to(base), path.read_bytes) for path in files)


def fingerprint_contents(items: Iterable[tuple[PurePath, Callable[[], bytes]]]) -> str:
    """`fingerprint` of (relative path, reader of its bytes) pairs, files that need not be on disk (e.g. read from
    git at another commit): sorted as paths, each hashed as its POSIX path and its bytes."""
    digest = hashlib.sha256()
    for rel, read in sorted(items, key=lambda item: item[0]):
        digest.update(rel.as_posix().encode())
        digest.update(read())
    return digest.hexdigest()


def digest_bytes(data: bytes) -> str:
    """The digest of one file's bytes (16 hex characters of sha256)."""
    return hashlib.sha256(data).hexdigest()[:16]


def _module_file(root: Path, module: str) -> Path | None:
    """`xmr_core.a.b` -> `xmr_core/a/b.py` or `xmr_core/a/b/__init__.py` under `root`, None if neither."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported_modules(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names of every module `tree` may import: `import x.y`, `from x import y` (x, and x.y in case
    y is a submodule), relative imports resolved against `module`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def imports_in(path: PurePath, text: str, module: str, is_package: bool) -> set[str]:
    """Dotted names of every module the source `text` of `path` (module `module`; a package's `__init__.py` when
    `is_package`) may import (`_imported_modules`); a file that does not parse is an error naming it and the line."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"{path}:{exc.lineno}: cannot parse its imports ({exc.msg})") from None
    return _imported_modules(tree, module, is_package)


_IMPORTS: dict[tuple[Path, str, int, int], set[str]] = {}  # (file, module, mtime_ns, size) -> its imports


def _imports_of(path: Path, module: str, is_package: bool) -> set[str]:
    """`_imported_modules` of a file, parsed again only when its modification time or size changed (a
    notebook writing many results parses the package once)."""
    stat = path.stat()
    key = (path, module, stat.st_mtime_ns, stat.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = imports_in(path, path.read_text(encoding="utf-8"), module, is_package)
    return _IMPORTS[key]


def _module_name(path: Path, root: Path) -> str:
    """`xmr_core/a/b.py` -> `xmr_core.a.b`; a package's `__init__.py` -> the package's name."""
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports anywhere in its body} for every module of the package under
    `root` (`_imported_modules`: a lazy import inside a function counts, `from a import b` counts a and a.b)."""
    names = {p: _module_name(p, root) for p in sorted((root / PACKAGE).rglob("*.py"))}
    modules = set(names.values())
    return {m: (_imports_of(p, m, p.name == "__init__.py") & modules) - {m} for p, m in names.items()}


def _package_modules(root: Path, package: str) -> set[str]:
    """Dotted names of every module under the package `package` (its subpackages' too)."""
    return {_module_name(p, root) for p in root.joinpath(*package.split(".")).rglob("*.py")}


def notebook_sources(notebook: Path, root: Path) -> list[Path]:
    """The `xmr_core` files under `root` that the notebook `notebook` (py:percent) imports, directly or
    through the package (by name too: `BY_NAME`), plus the package's data files; sorted."""
    pending = [(notebook, "__notebook__", False)]
    seen: set[Path] = set()
    while pending:
        path, module, is_package = pending.pop()
        named = _package_modules(root, BY_NAME[module]) if module in BY_NAME else set()
        for name in _imports_of(path, module, is_package) | named:
            parts = name.split(".")
            if parts[0] != PACKAGE:
                continue
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ too
                dotted = ".".join(parts[:i])
                found = _module_file(root, dotted)
                if found is not None and found not in seen:
                    seen.add(found)
                    pending.append((found, dotted, found.name == "__init__.py"))
    data = [p for p in package_files(root) if p.suffix in DATA_SUFFIXES]
    return sorted(seen | set(data))


def file_digests(files: Iterable[Path], root: Path) -> dict[str, str]:
    """{path relative to `root`: digest of its bytes}, sorted by path."""
    return {p.relative_to(root).as_posix(): digest_bytes(p.read_bytes()) for p in sorted(files)}


def code_cells(text: str) -> list[str]:
    """The code cells of a py:percent notebook (narration left out: editing prose does not stale a result)."""
    import jupytext

    nb = jupytext.reads(text, fmt="py:percent")
    return [cell.source.strip() for cell in nb.cells if cell.cell_type == "code"]


def code_digest(text: str) -> str:
    """The digest of a py:percent notebook's code cells."""
    return digest_bytes("\n\x00\n".join(code_cells(text)).encode("utf-8"))


def notebook_inputs(notebook: Path, root: Path) -> dict[str, object]:
    """What a result written by `notebook` is computed from, for its provenance: the digest of the
    notebook's code cells, each imported `xmr_core` file's digest, and their fingerprint."""
    files = notebook_sources(notebook, root)
    return {
        "notebook_code": code_digest(notebook.read_text(encoding="utf-8")),
        "xmr_core_sources": file_digests(files, root),
        "xmr_core_fingerprint": fingerprint(files, root),
    }
