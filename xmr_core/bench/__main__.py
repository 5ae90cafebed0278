"""`python -m xmr_core.bench NAME`: run one benchmark script and print its figures.

Each benchmark lives in `xmr_core/bench/<name>.py` with a `main(argv) -> None`; its last printed line
is `key=value` pairs.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from xmr_core import bench


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_"))
    if not argv or argv[0] not in names:
        sys.exit(f"usage: python -m xmr_core.bench {{{','.join(names)}}} [options]")
    importlib.import_module(f"xmr_core.bench.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    main()
