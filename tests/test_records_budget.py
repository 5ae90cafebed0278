"""The committed records of the cpu book (`runs/records/cpu/`: run records, split files, fit summaries) within their
budget (`runs.record.BUDGET_BYTES`, docs/records.md "Size"); none committed yet passes, one byte over fails."""

from __future__ import annotations

import os
from pathlib import Path

from xmr_core.config import project_root
from xmr_core.runs.record import BUDGET_BYTES, over_budget, records_root


def test_the_committed_cpu_records_are_within_their_budget() -> None:
    folder = records_root("cpu", project_root())
    assert over_budget(folder) == "", over_budget(folder)


def test_a_records_folder_over_the_budget_is_refused_naming_its_largest_files(tmp_path: Path) -> None:
    assert over_budget(tmp_path / "absent") == "" and over_budget(tmp_path) == ""
    (tmp_path / "fits").mkdir()
    (tmp_path / "fits" / "vse-0123456789abcdef.json.gz").write_bytes(b"x" * 1000)
    with open(tmp_path / "vse-0123456789abcdef.npz", "wb") as fh:  # sparse: no disk used
        fh.truncate(BUDGET_BYTES - 1000)
    assert over_budget(tmp_path) == ""  # at the budget
    (tmp_path / "splits").mkdir()
    (tmp_path / "splits" / "0123456789abcdef.npz").write_bytes(b"x")
    message = over_budget(tmp_path)
    assert message.startswith(f"{tmp_path}: 64.0 MB in 3 files, over the budget of 64 MB")
    assert message.endswith(f"the largest: vse-0123456789abcdef.npz {(BUDGET_BYTES - 1000) / 1e3:.0f} KB, "
                            f"{os.path.join('fits', 'vse-0123456789abcdef.json.gz')} 1 KB, "
                            f"{os.path.join('splits', '0123456789abcdef.npz')} 0 KB")
