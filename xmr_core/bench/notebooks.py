"""`python -m xmr_core.bench notebooks [BOOK_DIR]`: how much of each chapter notebook's code is logic.

A chapter notebook should be narration, parameters and calls into `xmr_core` (DESIGN.md; the goal: logic
under 10% of each notebook's code lines). Counted per py:percent notebook over its code cells:

- code lines: non-blank lines that are not comments;
- logic lines: the code lines of top-level statements that define or steer computation in the notebook
  itself: `def` / `class`, loops, conditionals (`if` statements and `x if c else y` expressions), `try`,
  `with`, and any statement holding a lambda or a comprehension.

Calls, assignments of call results, table and figure writing and f-string captions are not logic.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pandas as pd

_LOGIC_STATEMENTS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While,
                     ast.If, ast.Try, ast.With, ast.AsyncWith)
_LOGIC_EXPRESSIONS = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.IfExp)


def code_cells(text: str) -> list[str]:
    """The code cells of a py:percent notebook (markdown cells and the jupytext header left out)."""
    cells, current, is_code = [], [], False
    for line in text.splitlines():
        if line.startswith("# %%"):
            if is_code:
                cells.append("\n".join(current))
            current, is_code = [], "[markdown]" not in line
        elif is_code:
            current.append(line)
    if is_code:
        cells.append("\n".join(current))
    return cells


def _is_code(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def count_lines(cell: str, path: Path | str = "<cell>") -> tuple[int, int]:
    """(code lines, logic lines) of one code cell; a cell that does not parse is an error naming the file."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as err:
        raise SyntaxError(f"{path}: a code cell does not parse ({err.msg}, cell line {err.lineno})") from None
    lines = cell.splitlines()
    logic: set[int] = set()
    for stmt in tree.body:
        if isinstance(stmt, _LOGIC_STATEMENTS) or any(isinstance(n, _LOGIC_EXPRESSIONS) for n in ast.walk(stmt)):
            logic.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    code = sum(_is_code(line) for line in lines)
    return code, sum(_is_code(lines[i - 1]) for i in logic)


def notebook_logic(path: Path) -> dict[str, object]:
    """One notebook's code lines, logic lines and logic share (%)."""
    code = logic = 0
    for cell in code_cells(path.read_text()):
        c, lg = count_lines(cell, path)
        code, logic = code + c, logic + lg
    return {"notebook": str(path), "code lines": code, "logic lines": logic,
            "logic %": round(100 * logic / code, 1) if code else 0.0}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench notebooks")
    parser.add_argument("book", nargs="?", default="book")
    args = parser.parse_args(argv)
    paths = sorted(Path(args.book).glob("[0-9][0-9]_*/*.py"))
    if not paths:
        raise SystemExit(f"{args.book}: no chapter notebooks (book/NN_name/*.py) found")
    table = pd.DataFrame([notebook_logic(p) for p in paths])
    print(table.to_string(index=False))
    total = 100 * table["logic lines"].sum() / table["code lines"].sum()
    over = table[table["logic %"] >= 10]["notebook"].tolist()
    print(f"notebooks={len(table)} logic_percent_all={total:.1f} max_logic_percent={table['logic %'].max():.1f} "
          f"notebooks_at_or_over_10={len(over)}")
