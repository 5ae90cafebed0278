"""The ceiling benchmark script reads a chapter's ceiling.csv and judges the strong-start targets."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from xmr_core.bench.ceiling import main


def _write(tmp_path, rows):
    path = tmp_path / "pcme" / "ceiling.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["model", "seed", "rsum", "ceiling_rsum", "percent_of_ceiling", "converged"]
                 ).to_csv(path, index=False)


def test_targets_met_and_missed(tmp_path, capsys) -> None:
    # VSE0 seeds at 85 and 75 %: mean 80 -> the best-baseline target (>= 80) is met;
    # PCME at 60 % is below the every-model target (>= 70).
    _write(tmp_path, [("VSE0", 0, 340, 400, 85.0, True), ("VSE0", 1, 300, 400, 75.0, True),
                      ("PCME", 0, 240, 400, 60.0, False)])
    main(["pcme", "--results", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert "best baseline 80.0% (target >= 80, aim 90): met" in out[-2]
    assert "lowest model 60.0% (target >= 70): NOT met" in out[-2]
    assert out[-1] == "best_baseline_percent=80.00 lowest_percent=60.00 best_percent=80.00 all_converged=False"


def test_missing_file_names_it(tmp_path) -> None:
    with pytest.raises(SystemExit, match="ceiling.csv: not found"):
        main(["pcme", "--results", str(tmp_path)])


def test_a_chapter_with_its_own_baselines_is_judged_on_them(tmp_path, capsys) -> None:
    path = tmp_path / "hrem" / "ceiling.csv"
    path.parent.mkdir(parents=True)
    pd.DataFrame([("VSE++", 0, 300, 400, 75.0, True), ("GPO", 0, 340, 400, 85.0, True),
                  ("HREM fusion", 0, 360, 400, 90.0, True)],
                 columns=["model", "seed", "rsum", "ceiling_rsum", "percent_of_ceiling", "converged"]
                 ).to_csv(path, index=False)
    main(["hrem", "--results", str(tmp_path)])
    # the best of HREM's baselines (GPO 85 %), not the PCME chapter's (none here, which gave NaN)
    assert capsys.readouterr().out.splitlines()[-1] == \
        "best_baseline_percent=85.00 lowest_percent=75.00 best_percent=90.00 all_converged=True"


def test_a_multi_round_table_is_summed_over_its_rounds(tmp_path, capsys) -> None:
    path = tmp_path / "hmrn" / "ceiling.csv"
    path.parent.mkdir(parents=True)
    columns = ["model", "seed", "round", "converged", "R@1", "ceiling R@1", "R@5", "ceiling R@5", "R@10",
               "ceiling R@10"]
    # the ceiling sums to (2 + 10 + 20) + (30 + 80 + 90) = 232 over both rounds
    rows = [("Drill-down", 0, 1, True, 1, 2, 5, 10, 10, 20), ("Drill-down", 0, 2, True, 10, 30, 40, 80, 60, 90),
            ("HMRN", 0, 1, True, 2, 2, 8, 10, 16, 20), ("HMRN", 0, 2, False, 25, 30, 70, 80, 82, 90)]
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)
    main(["hmrn", "--results", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    # Drill-down: 16 + 110 = 126 of 232 = 54.31 %; HMRN: 26 + 177 = 203 of 232 = 87.50 %, one round not converged
    assert out[0] == "hmrn:"
    assert "best model HMRN 87.5%" in out[-2]
    assert out[-1] == "best_baseline_percent=54.31 lowest_percent=54.31 best_percent=87.50 all_converged=False"


def test_all_reports_every_chapter_with_a_ceiling_table(tmp_path, capsys) -> None:
    _write(tmp_path, [("VSE0", 0, 340, 400, 85.0, True)])
    (tmp_path / "msrm").mkdir()  # no ceiling.csv: not a chapter to report
    main(["all", "--results", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.endswith(":")] == ["pcme:"]


def test_a_table_of_another_layout_is_refused_by_name(tmp_path) -> None:
    path = tmp_path / "hmrn" / "ceiling.csv"
    path.parent.mkdir(parents=True)
    pd.DataFrame([("HMRN I-T", 0, 1, True, 0.4, 1.2, 33.3)],
                 columns=["model", "seed", "round", "converged", "R@1", "ceiling R@1", "R@1 % of ceiling"]
                 ).to_csv(path, index=False)
    with pytest.raises(SystemExit, match=r"hmrn/ceiling.csv: neither a single-query ceiling table"):
        main(["hmrn", "--results", str(tmp_path)])


def _commit(repo, message: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", message], cwd=repo,
                   check=True)


def test_against_compares_the_best_model_with_the_one_committed_at_a_revision(tmp_path, capsys) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    # then: PCME at 80, 84 and 82 % (mean 82, std 2), VSE0 at 70 %
    _write(tmp_path, [("VSE0", 0, 280, 400, 70.0, True), ("PCME", 0, 320, 400, 80.0, True),
                      ("PCME", 1, 336, 400, 84.0, True), ("PCME", 2, 328, 400, 82.0, True)])
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    _commit(tmp_path, "then")
    # now: every seed of PCME exactly 2 pp lower (78, 82, 80: mean 80), VSE0 at 72 %: paired by seed, every
    # resample of the seeds gives -2, so the interval is the point -2: below beyond noise
    _write(tmp_path, [("VSE0", 0, 288, 400, 72.0, True), ("PCME", 0, 312, 400, 78.0, True),
                      ("PCME", 1, 328, 400, 82.0, True), ("PCME", 2, 320, 400, 80.0, True)])
    main(["pcme", "--results", str(tmp_path), "--against", "HEAD"])
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("against HEAD: best model then PCME 82.0% (seed std 2.0, 3 seeds), now PCME 80.0%")
    assert out[-2].endswith("below it by 2.0 pp; below beyond noise: now − then -2.0 pp, 95% interval [-2.0, -2.0] "
                            "over seeds (paired: seed)")
    assert out[-1] == "best_percent_then=82.00 best_percent_now=80.00 at_or_above=False below_beyond_noise=True"
    _commit(tmp_path, "now")
    main(["pcme", "--results", str(tmp_path), "--against", "HEAD~1"])
    assert capsys.readouterr().out.splitlines()[-1] == \
        "best_percent_then=82.00 best_percent_now=80.00 at_or_above=False below_beyond_noise=True"
    main(["pcme", "--results", str(tmp_path), "--against", "HEAD"])  # the same table: at or above itself
    assert capsys.readouterr().out.splitlines()[-1] == \
        "best_percent_then=80.00 best_percent_now=80.00 at_or_above=True below_beyond_noise=False"


def test_against_a_change_that_seeds_disagree_on_is_inconclusive(tmp_path, capsys) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _write(tmp_path, [("PCME", 0, 320, 400, 80.0, True), ("PCME", 1, 336, 400, 84.0, True),
                      ("PCME", 2, 328, 400, 82.0, True)])
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    _commit(tmp_path, "then")
    # now 81, 83, 82 against 80, 84, 82: per seed +1, -1, 0, so resampling the seeds gives changes of both signs
    _write(tmp_path, [("PCME", 0, 324, 400, 81.0, True), ("PCME", 1, 332, 400, 83.0, True),
                      ("PCME", 2, 328, 400, 82.0, True)])
    main(["pcme", "--results", str(tmp_path), "--against", "HEAD"])
    out = capsys.readouterr().out.splitlines()
    assert "at or above it; inconclusive: now − then +0.0 pp" in out[-2]
    assert out[-1] == "best_percent_then=82.00 best_percent_now=82.00 at_or_above=True below_beyond_noise=False"


def test_against_a_revision_without_the_table_names_it(tmp_path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "README").write_text("x")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    _commit(tmp_path, "no tables yet")
    _write(tmp_path, [("VSE0", 0, 280, 400, 70.0, True)])
    with pytest.raises(SystemExit, match=r"pcme/ceiling.csv at HEAD: .*not in 'HEAD'"):
        main(["pcme", "--results", str(tmp_path), "--against", "HEAD"])
