"""`python -m xmr_core.bench claims`, and the can-fail test of every claim the book declares."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import xmr_core.chapters
from xmr_core import claims
from xmr_core.bench import claims as bench
from xmr_core.book.results import write_judgements
from xmr_core.claims import ClaimSpec, Evidence, can_fail, judge
from xmr_core.config import RunConfig


def test_every_declared_claim_of_the_book_can_hold_and_fail() -> None:
    for info in pkgutil.iter_modules(xmr_core.chapters.__path__):
        module = importlib.import_module(f"xmr_core.chapters.{info.name}")
        specs = list(getattr(module, "CLAIMS", []))
        assert len({s.key for s in specs}) == len(specs), f"{info.name}: repeated claim keys"
        for spec in specs:
            assert can_fail(spec) == "", f"{info.name}: {spec.key}"


def test_every_claim_judged_on_no_runs_says_what_it_would_need() -> None:
    """A claim is "not tested" with its reason (the `Judgement` refuses one without): a claim on models this book
    does not build names them in its declared `needs`; any other names the models this run lacks."""
    for info in pkgutil.iter_modules(xmr_core.chapters.__path__):
        module = importlib.import_module(f"xmr_core.chapters.{info.name}")
        for spec in getattr(module, "CLAIMS", []):
            j = judge(spec, {}, dataset="scenes", profile="cpu")
            where = f"{info.name}: {spec.key}"
            assert j.verdict == "not tested", where
            if spec.needs:
                assert j.reason == f"needs {spec.needs}", where
            elif not (spec.datasets and "scenes" not in spec.datasets or spec.profiles and "cpu" not in spec.profiles):
                assert all(m in j.reason for m in spec.compared), where


SPECS = [
    ClaimSpec("beats", "A beats B", "Table 1", "superiority", "R@1, pp", ("A", "B")),
    ClaimSpec("rises", "R@1 rises with K", "Table 2", "trend", "R@1, pp", ("A", "B", "C")),
]


@pytest.fixture()
def demo_chapter(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("xmr_core.chapters.demo")
    module.CLAIMS = SPECS  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xmr_core.chapters.demo", module)
    return module


def _judge_demo(tmp_path: Path) -> Path:
    s = (0, 1, 2)
    ev = {"A": Evidence(s, np.array([50.0, 50.5, 49.5])), "B": Evidence(s, np.array([40.0, 40.5, 39.8])),
          "C": Evidence((5, 6, 7), np.array([30.0, 30.1, 29.9]))}
    judged = [judge(SPECS[0], ev), judge(SPECS[1], ev)]
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path), DATASET="scenes")
    return write_judgements(judged, "demo", "train", run)


def test_migrated_chapter_summary(tmp_path: Path, demo_chapter: types.ModuleType, capsys: pytest.CaptureFixture) -> None:
    csv = _judge_demo(tmp_path)
    (tmp_path / "demo" / "claims.md").write_text("# claims\n\n| 1 | A beats B | x |\n| 2 | R@1 rises | y |\n")
    bench.main(["--results", str(tmp_path)])
    out = capsys.readouterr().out
    frame = pd.read_csv(csv)
    widths = frame["high"] - frame["low"]
    assert "demo: 2 declared claims" in out
    assert "superiority: 1 (1 held)" in out and "trend: 1 (1 did not hold)" in out  # C is below B: falls
    assert f"paired: 1 of 2; median interval width {widths.median():.3g}" in out
    assert out.strip().splitlines()[-1] == "chapters=1 migrated=1 claims=2 judged=2 paired=1 failures=0"


def test_verdict_on_an_unconverged_run_fails(tmp_path: Path, demo_chapter: types.ModuleType,
                                             capsys: pytest.CaptureFixture) -> None:
    csv = _judge_demo(tmp_path)
    frame = pd.read_csv(csv, dtype={"unconverged": str})
    frame.loc[0, "unconverged"] = "B"  # a verdict written by hand past the judge
    frame.to_csv(csv, index=False)
    with pytest.raises(SystemExit) as stop:
        bench.main(["demo", "--results", str(tmp_path)])
    assert stop.value.code == 1
    assert "claim 'beats' is 'held' on a run that did not converge (B)" in capsys.readouterr().out


def test_a_claim_that_cannot_fail_fails_the_bench(tmp_path: Path, demo_chapter: types.ModuleType,
                                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(claims, "_decide", lambda kind, margin, low, high: ("held", "always"))
    with pytest.raises(SystemExit):
        bench.main(["demo", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert "claim 'beats': clear win judged 'held', clear loss judged 'held'" in out
    assert "no judgements yet" in out


def test_unmigrated_chapter_counts_its_old_claims_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "nochapter").mkdir()  # no module declares its claims
    (tmp_path / "nochapter" / "claims.md").write_text(
        "# Claims\n\n| # | claim | source | evidence | verdict |\n|---|---|---|---|---|\n"
        "| 1 | a | b | c | **held** |\n| 2 | d | e | f | **within noise** |\n\nOf 2 claims.\n")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--results", str(tmp_path)])
    assert stop.value.code == 1
    assert "nochapter: not migrated: 2 claims in its committed claims.md judged by the old rule" in capsys.readouterr().out


def test_a_page_with_more_claims_than_judgements_is_partly_migrated(tmp_path: Path, demo_chapter: types.ModuleType,
                                                                   capsys: pytest.CaptureFixture) -> None:
    _judge_demo(tmp_path)
    (tmp_path / "demo" / "claims.md").write_text("".join(f"| {i} | claim {i} | x |\n" for i in range(1, 6)))
    with pytest.raises(SystemExit):
        bench.main(["demo", "--results", str(tmp_path)])
    assert "demo: partly migrated: 3 claims in its committed claims.md judged by the old rule" in capsys.readouterr().out


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_against_a_revision_counts_both_pages_and_names_each_changed_verdict(
        tmp_path: Path, demo_chapter: types.ModuleType, capsys: pytest.CaptureFixture) -> None:
    _git(tmp_path, "init", "-q")
    csv = _judge_demo(tmp_path)  # then: 'beats' held, 'rises' did not hold (C falls below B)
    page = "# claims\n\n| 1 | A beats B | x | **held** |\n| 2 | R@1 rises | y | **did not hold** |\n"
    (tmp_path / "demo" / "claims.md").write_text(page)
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "then")
    then = pd.read_csv(csv)
    # now: a retrain moved 'beats' to within noise, by hand in the table and on the page
    now = then.copy()
    now.loc[0, ["effect", "low", "high", "verdict"]] = [1.5, -0.5, 3.5, "within noise"]
    now.to_csv(csv, index=False)
    (tmp_path / "demo" / "claims.md").write_text(page.replace("**held**", "**within noise**"))
    bench.main(["demo", "--results", str(tmp_path), "--against", "HEAD"])
    out = capsys.readouterr().out.splitlines()
    b = then.loc[0]
    assert "  at HEAD: 2 claims (1 held, 1 did not hold, 0 within noise, 0 not tested)" in out
    assert "  now:     2 claims (0 held, 1 did not hold, 1 within noise, 0 not tested)" in out
    assert (f"  changed beats: held {b['effect']:+.3g} [{b['low']:+.3g}, {b['high']:+.3g}] -> within noise +1.5 "
            "[-0.5, +3.5]") in out
    assert "  2 claims judged at both, 1 changed verdict; 0 judged at one only" in out
    assert out[-1].endswith("failures=0 against=HEAD changed=1")


def test_against_a_page_judged_by_the_old_rule_compares_counts_only(
        tmp_path: Path, demo_chapter: types.ModuleType, capsys: pytest.CaptureFixture) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "claims.md").write_text("| 1 | a | **held** |\n| 2 | b | **held** |\n| 3 | c | **not tested** |\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "old rule")
    _judge_demo(tmp_path)
    (tmp_path / "demo" / "claims.md").write_text("| 1 | A beats B | **held** |\n| 2 | R@1 rises | **did not hold** |\n")
    bench.main(["demo", "--results", str(tmp_path), "--against", "HEAD"])
    out = capsys.readouterr().out.splitlines()
    assert "  at HEAD: 3 claims (2 held, 0 did not hold, 0 within noise, 1 not tested)" in out
    assert "  no judgements at HEAD (its claims were judged by the old rule): counts only" in out
    assert out[-1].endswith("against=HEAD changed=0")


def test_a_rendered_claims_page_counts_each_verdict_with_its_reason() -> None:
    """`claims.render_claims` writes "**verdict**: reason" in the last cell (a reason's own "|" escaped): the page's
    counts are the judgements' verdicts."""
    s = (0, 1, 2)
    ev = {"A": Evidence(s, np.array([50.0, 50.5, 49.5])), "B": Evidence(s, np.array([40.0, 40.5, 39.8])),
          "C": Evidence((5, 6, 7), np.array([30.0, 30.1, 29.9]))}
    unbuilt = ClaimSpec("unbuilt", "A beats D", "Table 3", "superiority", "R@1, pp", ("A", "D"), needs="D | E")
    judged = [judge(SPECS[0], ev), judge(SPECS[1], ev), judge(unbuilt, ev)]
    page = claims.render_claims(judged, "demo", profile="smoke", dataset="scenes")
    assert "needs D \\| E" in page and all(j.reason for j in judged)
    expected = {v: sum(j.verdict == v for j in judged) for v in claims.VERDICTS}
    assert expected["not tested"] == 1 and sum(expected.values()) == 3
    assert bench.page_counts(page, "demo/claims.md") == expected


def test_against_a_page_with_an_unknown_verdict_names_the_file_and_line(
        tmp_path: Path, demo_chapter: types.ModuleType) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "claims.md").write_text("# c\n\n| 1 | a | **held** |\n| 2 | b | **probably** |\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "odd page")
    with pytest.raises(SystemExit, match=r"demo/claims.md@HEAD:4: a claim row with the verdict 'probably'"):
        bench.main(["demo", "--results", str(tmp_path), "--against", "HEAD"])


def test_seeds_to_resolve_projects_a_t_interval_over_seeds() -> None:
    """By hand, with t(0.975, n-1)/sqrt(n) from a t table: 4.303/1.732 = 2.484 at 3 seeds, 3.182/2 = 1.591 at 4,
    2.776/2.236 = 1.241 at 5, 2.365/2.828 = 0.836 at 8, 2.306/3 = 0.769 at 9."""
    # superiority, +1 with 1.5 below it: the interval must shrink under 1/1.5 of today's (2.484 x 0.667 = 1.656)
    assert bench.seeds_to_resolve("superiority", 1.0, -0.5, 2.5, 3) == (4, "held")
    # the same effect below the bound, reached from above: 'did not hold'
    assert bench.seeds_to_resolve("trend", -1.0, -2.5, 0.5, 3) == (4, "did not hold")
    # non-inferiority, margin 1: -0.5 is 0.5 above the bound -1, reached by 1.5 below: under 1/3 (0.828) -> 9
    assert bench.seeds_to_resolve("non-inferiority", -0.5, -2.0, 1.0, 3, margin=1.0) == (9, "held")
    # equivalence, margin 1: +0.2 needs both sides inside ±1; the upper one (0.8 of 1.5 -> 1.325) decides -> 5
    assert bench.seeds_to_resolve("equivalence", 0.2, -1.3, 1.7, 3, margin=1.0) == (5, "held")
    # a universal claim is judged on its weakest pair by its `each` kind
    assert bench.seeds_to_resolve("universal (superiority)", 1.0, -0.5, 2.5, 3) == (4, "held")
    assert bench.seeds_to_resolve("superiority", 0.0, -1.0, 1.0, 3) == (None, "did not hold")  # on the bound
    assert bench.seeds_to_resolve("superiority", 1e-4, -1.0, 1.0, 3)[0] is None  # beyond MAX_SEEDS


def test_seeds_lists_the_claims_within_noise(tmp_path: Path, demo_chapter: types.ModuleType,
                                             capsys: pytest.CaptureFixture) -> None:
    s = (0, 1, 2)
    ev = {"A": Evidence(s, np.array([50.0, 51.0, 49.0])), "B": Evidence(s, np.array([50.5, 49.0, 50.0]))}
    judged = [judge(SPECS[0], ev)]  # A - B per seed: -0.5, +2, -1: within noise
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path), DATASET="scenes")
    write_judgements(judged, "demo", "train", run)
    (tmp_path / "demo" / "claims.md").write_text("# claims\n\n| 1 | A beats B | x |\n")
    bench.main(["demo", "--results", str(tmp_path), "--seeds"])
    j = judged[0]
    n, verdict = bench.seeds_to_resolve("superiority", j.effect, j.low, j.high, 3)
    assert j.verdict == "within noise" and verdict == "held"  # the mean difference is +1/6
    assert (f"  within noise at 3 seeds: beats {j.effect:+.3g} [{j.low:+.3g}, {j.high:+.3g}] over seeds: {n} seeds "
            "for 'held' at this effect") in capsys.readouterr().out.splitlines()


def test_central_claims_get_the_seed_cap_when_it_would_resolve_one(tmp_path: Path, demo_chapter: types.ModuleType,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """The rule for more seeds: train.py's claims are central; one within noise that `SEED_CAP` seeds would resolve
    at its effect (seeds_to_resolve, checked above by its own test) gives train.py `SEED_CAP` seeds; one that would
    need more is named and changes nothing; ablate.py's claims never count."""
    s = (0, 1, 2)
    near = {"A": Evidence(s, np.array([50.0, 51.0, 49.0])), "B": Evidence(s, np.array([50.5, 49.0, 50.0])),
            "C": Evidence(s, np.array([51.0, 49.5, 50.5]))}  # A - B per seed: -0.5, +2, -1 (needs many seeds)
    wide = {"A": Evidence(s, np.array([51.5, 52.2, 49.5])), "B": Evidence(s, np.array([50.0, 50.2, 49.0]))}
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path), DATASET="scenes")
    beats_wide, beats_near = judge(SPECS[0], wide), judge(SPECS[0], near)  # wide: A - B per seed +1.5, +2, +0.5
    need_wide = bench.seeds_to_resolve("superiority", beats_wide.effect, beats_wide.low, beats_wide.high, 3)[0]
    need_near = bench.seeds_to_resolve("superiority", beats_near.effect, beats_near.low, beats_near.high, 3)[0]
    assert beats_wide.verdict == beats_near.verdict == "within noise"
    assert 3 < need_wide <= bench.SEED_CAP < need_near  # the two cases the rule tells apart
    write_judgements([beats_near], "demo", "train", run)
    write_judgements([beats_wide], "demo", "ablate", run)  # not central: changes nothing
    frame = bench.judged(tmp_path / "demo")
    assert list(frame["notebook"]) == ["ablate", "train"]
    assert bench.central_seeds(frame) == (3, [], ["beats"])
    rises = judge(SPECS[1], near)
    assert rises.verdict == "within noise"
    assert bench.seeds_to_resolve("trend", rises.effect, rises.low, rises.high, 3)[0] > bench.SEED_CAP
    write_judgements([beats_wide, rises], "demo", "train", run)
    assert bench.central_seeds(bench.judged(tmp_path / "demo")) == (bench.SEED_CAP, ["beats"], ["rises"])
    (tmp_path / "demo" / "claims.md").write_text("# claims\n\n| 1 | A beats B | x |\n")
    bench.main(["demo", "--results", str(tmp_path), "--seeds"])
    assert (f"  central claims (train.py): 2 within noise on seed noise; train.py's seeds: {bench.SEED_CAP} (within "
            f"{bench.SEED_CAP} seeds at their effect: beats; beyond: rises)") in capsys.readouterr().out.splitlines()
