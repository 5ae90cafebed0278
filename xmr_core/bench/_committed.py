"""Results as committed at a git revision, for the benches' `--against REV` (`ceiling`, `claims`)."""

from __future__ import annotations

from pathlib import Path

from xmr_core.book.staleness import git


def committed_text(results: Path, rev: str, rel: str) -> str:
    """The text of `results/<rel>` at git revision `rev`; exits with one line naming the file and git's reason when
    git cannot show it (no such revision, no such file at it)."""
    shown = git(results, "show", f"{rev}:./{rel}")
    if shown.returncode != 0:
        why = shown.stderr.strip().splitlines() or [f"git show exited {shown.returncode}"]
        raise SystemExit(f"{results / rel} at {rev}: {why[-1]}")
    return shown.stdout

