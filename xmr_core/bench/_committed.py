"""Results as committed at a git revision, for the benches' `--against REV` (`ceiling`, `claims`)."""

from __future__ import annotations

from pathlib import Path

from xmr_core.staleness import git


def committed_text(results: Path, rev: str, rel: str) -> str:
    """The text of `results/<rel>` at git revision `rev`; exits with one line naming the file and git's reason when
    git cannot show it (no such revision, no such file at it)."""
    shown = git(results, "show", f"{rev}:./{rel}")
    if shown.returncode != 0:
        why = shown.stderr.strip().splitlines() or [f"git show exited {shown.returncode}"]
        raise SystemExit(f"{results / rel} at {rev}: {why[-1]}")
    return shown.stdout


def committed_names(results: Path, rev: str, folder: str) -> list[str]:
    """The file names in `results/<folder>` at git revision `rev` ([] when the folder is not there)."""
    listed = git(results, "ls-tree", "--name-only", rev, f"./{folder}/")  # paths relative to `results`
    return [Path(line).name for line in listed.stdout.splitlines()] if listed.returncode == 0 else []
