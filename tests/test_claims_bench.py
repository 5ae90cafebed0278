"""`python -m xmr_core.bench claims`, and the can-fail test of every claim the book declares."""

from __future__ import annotations

import dataclasses
import importlib
import math
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


WORDS = {"paper": "pcme", "quote": "We observe performance drops with increasing uncertainty.",  # a PCME sentence
         "reading": "A above B", "seed_only": "the demo keeps each run's score only"}
SPECS = [
    ClaimSpec("beats", "A beats B", "Table 1", "superiority", "R@1, pp", ("A", "B"), **WORDS),
    ClaimSpec("rises", "R@1 rises with K", "Table 2", "trend", "R@1, pp", ("A", "B", "C"), **WORDS),
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
    assert "  seed-only verdicts (no per-query values): 2; without a stated reason: 0" in out
    assert "    beats, rises: the demo keeps each run's score only" in out
    assert out.strip().splitlines()[-1] == ("chapters=1 migrated=1 claims=2 judged=2 paired=1 seed_only=2 "
                                            "seed_only_unexplained=0 failures=0")
    assert "  the paper's words: 2 of 2 claims; " in out


def test_a_claim_without_the_papers_words_fails_the_bench(tmp_path: Path, demo_chapter: types.ModuleType,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    _judge_demo(tmp_path)
    monkeypatch.setattr(demo_chapter, "CLAIMS", [SPECS[0], ClaimSpec("rises", "R@1 rises with K", "Table 2", "trend",
                                                                     "R@1, pp", ("A", "B", "C"))])
    with pytest.raises(SystemExit) as stop:
        bench.main(["demo", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert stop.value.code == 1 and "demo: claim 'rises' has no quote, no reading" in out
    assert "the paper's words: 1 of 2 claims" in out


def test_a_seed_only_verdict_without_its_reason_fails_the_bench(tmp_path: Path, demo_chapter: types.ModuleType,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    csv = _judge_demo(tmp_path)
    assert list(pd.read_csv(csv)["seed-only reason"]) == [WORDS["seed_only"]] * 2  # written beside the verdict
    frame = pd.read_csv(csv).drop(columns="seed-only reason")  # a file written before the column: the declaration's
    frame.to_csv(csv, index=False)
    monkeypatch.setattr(demo_chapter, "CLAIMS", [SPECS[0], dataclasses.replace(SPECS[1], seed_only="")])
    with pytest.raises(SystemExit) as stop:
        bench.main(["demo", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert stop.value.code == 1
    assert "  seed-only verdicts (no per-query values): 2; without a stated reason: 1" in out
    assert "    rises: NO REASON STATED" in out
    assert "demo: claim 'rises' is judged on seed scores only and states no reason" in out
    assert "seed_only=2 seed_only_unexplained=1 failures=1" in out


def test_every_committed_seed_only_verdict_states_why() -> None:
    """Issue 73: 0 verdicts on seed scores only (no per-query values) without a stated reason, in every chapter's
    committed judgements (the reason is the row's, else the claim's declared `ClaimSpec.seed_only`)."""
    results = Path(__file__).resolve().parents[1] / "results"
    seen = 0
    for folder in sorted(p.parent for p in results.glob("*/claims.md")):
        frame = bench.judged(folder)
        if frame.empty:
            continue
        rows = bench.seed_only_rows(frame, bench.declared(folder.name) or [])
        seen += len(rows)
        assert list(rows.loc[rows["why"] == "", "key"]) == [], folder.name
    assert seen > 0  # the committed results have such verdicts: each was checked


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
    monkeypatch.setattr(claims, "_decide", lambda spec, boot, comparisons=1: ("held", "always", 0.01))
    with pytest.raises(SystemExit):
        bench.main(["demo", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert "claim 'beats': clear win judged 'held', clear loss judged 'held'" in out
    assert "no judgements yet" in out


def test_unmigrated_chapter_counts_its_old_claims_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "nochapter").mkdir()  # no module declares its claims
    (tmp_path / "nochapter" / "claims.md").write_text(
        "# Claims\n\n| # | claim | source | evidence | verdict |\n|---|---|---|---|---|\n"
        "| 1 | a | b | c | **held** |\n| 2 | d | e | f | **inconclusive** |\n\nOf 2 claims.\n")
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
    # now: a retrain moved 'beats' to inconclusive, by hand in the table and on the page
    now = then.copy()
    now.loc[0, ["effect", "low", "high", "verdict"]] = [1.5, -0.5, 3.5, "inconclusive"]
    now.to_csv(csv, index=False)
    (tmp_path / "demo" / "claims.md").write_text(page.replace("**held**", "**inconclusive**"))
    bench.main(["demo", "--results", str(tmp_path), "--against", "HEAD"])
    out = capsys.readouterr().out.splitlines()
    b = then.loc[0]
    assert "  at HEAD: 2 claims (1 held, 1 did not hold, 0 negligible, 0 inconclusive, 0 not tested)" in out
    assert "  now:     2 claims (0 held, 1 did not hold, 0 negligible, 1 inconclusive, 0 not tested)" in out
    assert (f"  changed beats: held {b['effect']:+.3g} [{b['low']:+.3g}, {b['high']:+.3g}] -> inconclusive +1.5 "
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
    assert "  at HEAD: 3 claims (2 held, 0 did not hold, 0 negligible, 0 inconclusive, 1 not tested)" in out
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


def test_seeds_to_resolve_projects_to_the_smallest_effect_of_interest() -> None:
    """By hand, with t(0.975, n-1)/sqrt(n) from a t table: 4.303/1.732 = 2.484 at 3 seeds, 3.182/2 = 1.591 at 4,
    2.776/2.236 = 1.2416 at 5. The goal is a width, not an effect: an interval narrower than ± the goal decides the
    claim whatever its true effect (clears the bound, or lies inside ± the goal)."""
    # seeds only, half-width 2 at 3 seeds, goal 1: under 1/2 of today's, 2.484 / 2 = 1.242 > 1.2416 -> 5 seeds
    assert bench.seeds_to_resolve(2.0, 3, 1.0) == (5, None)
    assert bench.seeds_to_resolve(0.9, 3, 1.0) == (3, None)  # already narrower than the goal
    # half the variance from the queries: sqrt(0.5) x 2 = 1.414 stays at any seeds, above the goal 1.2; the queries
    # part shrinks like 1/sqrt(Q): 1000 x (1.414 / 1.2)^2 = 1388.9 -> more than 1388.9, 1390 with the +1 of the rule
    assert bench.seeds_to_resolve(2.0, 3, 1.2, seed_share=0.5, n_queries=1000) == (None, 1390)
    assert bench.seeds_to_resolve(2.0, 3, 0.0) == (None, None)  # no smallest effect of interest: no count
    # the goal: a margin for the kinds that have one, else the metric family's smallest effect of interest
    assert bench.target("non-inferiority", "R@1, pp", 1.0) == (1.0, "the margin 1")
    assert bench.target("universal (equivalence)", "rSum", 10.0)[0] == 10.0
    assert bench.target("peak", "rSum on the whole test split", 0.0)[0] == 3.0  # 0.5 pp on each of six recalls
    assert bench.target("superiority", "sigma of each caption", 0.0)[0] == 0.0


def test_seeds_lists_the_inconclusive_claims(tmp_path: Path, demo_chapter: types.ModuleType,
                                             capsys: pytest.CaptureFixture) -> None:
    s = (0, 1, 2)
    ev = {"A": Evidence(s, np.array([50.0, 51.0, 49.0])), "B": Evidence(s, np.array([50.5, 49.0, 50.0]))}
    judged = [judge(SPECS[0], ev)]  # A - B per seed: -0.5, +2, -1: inconclusive
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path), DATASET="scenes")
    write_judgements(judged, "demo", "train", run)
    (tmp_path / "demo" / "claims.md").write_text("# claims\n\n| 1 | A beats B | x |\n")
    bench.main(["demo", "--results", str(tmp_path), "--seeds"])
    j = judged[0]
    n, _ = bench.seeds_to_resolve((j.high - j.low) / 2, 3, 0.5)  # R@1 in pp: 0.5 pp
    assert j.verdict == "inconclusive" and n > 3
    assert (f"  inconclusive at 3 seeds: beats {j.effect:+.3g} [{j.low:+.3g}, {j.high:+.3g}] over seeds: {n} seeds "
            "to resolve it at the smallest effect of interest 0.5") in capsys.readouterr().out.splitlines()


def test_central_claims_get_the_seed_cap_when_it_would_resolve_one(tmp_path: Path, demo_chapter: types.ModuleType,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """The rule for more seeds: train.py's claims are central; one inconclusive that `SEED_CAP` seeds would resolve
    at its smallest effect of interest (seeds_to_resolve, checked above by its own test) gives train.py `SEED_CAP`
    seeds; one that would need more is named and changes nothing; ablate.py's claims never count."""
    s = (0, 1, 2)
    near = {"A": Evidence(s, np.array([50.0, 51.0, 49.0])), "B": Evidence(s, np.array([50.5, 49.0, 50.0])),
            "C": Evidence(s, np.array([51.0, 49.5, 50.5]))}  # A - B per seed: -0.5, +2, -1 (needs many seeds)
    close = {"A": Evidence(s, np.array([50.2, 50.7, 50.7])), "B": Evidence(s, np.array([50.0, 50.2, 49.9]))}
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path), DATASET="scenes")
    beats_close, beats_near = judge(SPECS[0], close), judge(SPECS[0], near)  # close: A - B +0.2, +0.5, +0.8
    need_close = bench.seeds_to_resolve((beats_close.high - beats_close.low) / 2, 3, 0.5)[0]
    need_near = bench.seeds_to_resolve((beats_near.high - beats_near.low) / 2, 3, 0.5)[0]
    assert beats_close.verdict == beats_near.verdict == "inconclusive"
    assert 3 < need_close <= bench.SEED_CAP < need_near  # the two cases the rule tells apart
    write_judgements([beats_near], "demo", "train", run)
    write_judgements([beats_close], "demo", "ablate", run)  # not central: changes nothing
    frame = bench.judged(tmp_path / "demo")
    assert list(frame["notebook"]) == ["ablate", "train"]
    assert bench.central_seeds(frame) == (3, [], ["beats"])
    rises = judge(SPECS[1], near)
    assert rises.verdict == "inconclusive"
    write_judgements([beats_close, rises], "demo", "train", run)
    assert bench.central_seeds(bench.judged(tmp_path / "demo")) == (bench.SEED_CAP, ["beats"], ["rises"])
    (tmp_path / "demo" / "claims.md").write_text("# claims\n\n| 1 | A beats B | x |\n")
    bench.main(["demo", "--results", str(tmp_path), "--seeds"])
    assert (f"  central claims (train.py): 2 inconclusive on seed noise; train.py's seeds: {bench.SEED_CAP} (within "
            f"{bench.SEED_CAP} seeds at their smallest effect of interest: beats; beyond: rises)"
            ) in capsys.readouterr().out.splitlines()


def test_rejudged_relabels_committed_rows_by_hand() -> None:
    rows = pd.DataFrame([
        # a two-model claim within noise inside ±0.5 pp: negligible; wider: inconclusive
        {"key": "a", "kind": "superiority", "metric": "R@1, pp", "effect": 0.1, "low": -0.3, "high": 0.4,
         "margin": np.nan, "verdict": "within noise"},
        {"key": "b", "kind": "superiority", "metric": "R@1, pp", "effect": 0.1, "low": -0.9, "high": 1.1,
         "margin": np.nan, "verdict": "within noise"},
        # held, effect 1, low 0.5: p = 2 Phi(-1.96 x 1 / 0.5) = 2 Phi(-3.92) = 8.9e-5
        {"key": "c", "kind": "superiority", "metric": "R@1, pp", "effect": 1.0, "low": 0.5, "high": 1.5,
         "margin": np.nan, "verdict": "held"},
        # a peak: its parts are not in the file
        {"key": "d", "kind": "peak", "metric": "R@1, pp", "effect": -0.1, "low": -0.3, "high": 0.2,
         "margin": np.nan, "verdict": "within noise"},
    ])
    out = bench.rejudged(rows)
    assert list(out["now"]) == ["negligible", "inconclusive", "held", "inconclusive"]
    assert list(out["how"]) == ["same interval"] * 3 + ["needs its per-side values"]
    assert out["p"].iloc[2] == pytest.approx(8.86e-5, rel=0.01)
    # negligible, effect 0.1 in [-0.3, 0.4] against ±0.5: the nearer edge 0.5 - 0.1 = 0.4 over a reach of 0.3
    assert out["p"].iloc[0] == pytest.approx(2 * 0.5 * math.erfc(1.959964 * 0.4 / 0.3 / math.sqrt(2)), rel=1e-3)
    assert list(out["after Holm"]) == ["held" if v == "held" else v for v in out["now"]]


def test_calibration_prints_every_kind_at_3_and_5_seeds() -> None:
    lines, _ = bench.calibration_lines([claims.Noise(1.0, source="seed scores only")], 20)
    assert lines[0].startswith("calibration on seed scores only")
    for key in ("superiority", "non-inferiority", "equivalence", "trend 3", "trend 5", "peak 3", "peak 4", "peak 6",
                "universal 3"):
        row = next(line for line in lines if line.strip().startswith(key + " "))
        assert "3 seeds" in row and "5 seeds" in row
    assert lines[-1].startswith("  power at the paper's effect: none")
