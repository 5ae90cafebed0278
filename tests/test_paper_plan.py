"""The run plan of the paper profiles (`xmr book plan --profile paper`) does none of the work it throws away: the
trunk's features it would extract are zeros of their shape (`trunk.attach_grid_features(stand_in=True)`), the test
split untrained models are scored on is cut (`protocols.planned_corpus`); and the benches that cost the paper book
(`bench paperplan`) and check a GPU (`bench gpu`, which without CUDA stops in one line)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import word_split

from xmr_core.bench import gpu, paperplan
from xmr_core.book.plan import PAPER_BOOKS, Plan, PlannedRun
from xmr_core.data.corpus import Corpus, Split
from xmr_core.encoders.trunk import attach_grid_features, imagenet_trunk
from xmr_core.encoders.trunk_cache import trunk_dir
from xmr_core.experiment.protocols import planned_corpus
from xmr_core.runs import trace as plantrace

ROOT = Path(__file__).resolve().parents[1]


def _photos(name: str, n: int, seed: int) -> Split:
    """`word_split` with 224-pixel images (a ResNet's 7 x 7 grid)."""
    pixels = np.random.default_rng(seed).integers(0, 255, (n, 224, 224, 3), dtype=np.uint8)
    return dataclasses.replace(word_split(name, n, seed), images=pixels)


def test_features_not_cached_are_stood_in_for_and_cached_ones_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))
    trunk = imagenet_trunk("resnet18", None)
    extracted = _photos("val", 2, 0)
    attach_grid_features([extracted], trunk, progress=False)  # extracted and cached
    cached, missing = _photos("val", 2, 0), _photos("train", 4, 1)
    seconds = attach_grid_features([cached, missing], trunk, progress=False, stand_in=True)
    assert seconds["train"] is None and seconds["val"] is not None
    np.testing.assert_array_equal(cached.grid, extracted.grid)  # a cached split's own features
    assert missing.grid.shape == (4, trunk.cells, trunk.channels) and missing.grid.dtype == np.float32
    assert not missing.grid.any() and missing.grid.base.nbytes == trunk.cells * trunk.channels * 4  # one row held
    assert [p.name.split("-")[0] for p in (trunk_dir(trunk.key) / "features").iterdir()] == ["val"]  # none written


def _corpus(test_images: int) -> Corpus:
    return Corpus("coco", {"train": word_split("train", 4, 0), "val": word_split("val", 3, 1),
                           "test": word_split("test", test_images, 2)})


def test_the_plan_scores_untrained_models_on_the_first_test_images_of_the_papers_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(12)
    monkeypatch.delenv(plantrace.PLAN_ENV, raising=False)
    assert planned_corpus(corpus, "paper", limit=5) is corpus  # not tracing: the whole test split
    monkeypatch.setenv(plantrace.PLAN_ENV, str(tmp_path / "plan.jsonl"))
    for profile in ("smoke", "cpu"):  # the scenes plans list every run as it will be, test split and all
        assert planned_corpus(corpus, profile, limit=5) is corpus
    assert planned_corpus(_corpus(5), "paper", limit=5).splits["test"].n_images == 5
    for profile in ("paper", "paper-smoke"):
        cut = planned_corpus(corpus, profile, limit=5)
        test = cut["test"]
        assert test.image_ids == corpus["test"].image_ids[:5] and test.n_captions == 10 and test.name == "test"
        assert cut["train"] is corpus["train"] and cut["val"] is corpus["val"]  # what the runs' keys read


def _planned(notebook: str, cached: bool, seconds: float, source: str) -> PlannedRun:
    return PlannedRun({"notebook": notebook, "cached": cached, "key": notebook + str(seconds), "stage": 1,
                       "label": "", "method": "vse", "seed": 0, "provisional": False, "epochs": 60}, seconds, source)


def test_the_paperplan_table_counts_each_run_under_the_chapter_that_first_asks_for_it() -> None:
    plan = Plan("paper", [_planned("book/01_pcme/train.py", False, 7200.0, "per step"),  # the notebook's path
                          _planned("book/01_pcme/ablate.py", True, 100.0, "recorded"),
                          _planned("book/04_dvse/train.py", False, 3600.0, "default")],
                failed=[("02_msrm/ablate", "ValueError: x")])
    rows = paperplan.chapter_rows(plan, "cub")
    assert list(rows["chapter"]) == list(PAPER_BOOKS["cub"])
    assert rows[["runs", "to train", "hours", "unmeasured"]].values.tolist() == [[2, 1, 2.0, 0], [0, 0, 0.0, 0],
                                                                               [1, 1, 1.0, 1]]
    assert list(rows["failed"]) == ["", "02_msrm/ablate", ""]
    table = paperplan.markdown(pd.concat([rows]), "core-hours")
    assert "| cub | 02_msrm (failed: 02_msrm/ablate) | 0 | 0 | 0 |" in table
    assert table.splitlines()[-1] == "| cub | **total** | 3 | 2 | 3 |"
    saved = paperplan.plan_rows(plan)
    assert list(saved["chapter"]) == ["01_pcme", "01_pcme", "04_dvse"] and list(saved["epochs"]) == [60] * 3
    assert list(saved["core-s"]) == [7200.0, 100.0, 3600.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_gpu_bench_stops_in_one_line_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu.book, "run_book", lambda *a, **k: pytest.fail("ran a notebook without CUDA"))
    with pytest.raises(SystemExit) as stopped:
        gpu.main([])
    assert stopped.value.code == gpu.NO_CUDA and "\n" not in gpu.NO_CUDA
    done = subprocess.run([sys.executable, "-m", "xmr_core.bench", "gpu"], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "" and done.stderr == gpu.NO_CUDA + "\n"
