"""Config: profiles, parameters, seeding, device selection; packaging kept in step."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch

from xmr_core.config import RunConfig, check_profile, seed_everything, select_device

ROOT = Path(__file__).resolve().parents[1]


def test_profiles_and_parameters() -> None:
    cfg = RunConfig.from_params(PROFILE="smoke", SEED=3, DEVICE="cpu", LR=0.1)
    assert (cfg.profile, cfg.seed, cfg.extra) == ("smoke", 3, {"lr": 0.1})
    text = cfg.describe()
    assert "profile" in text and "smoke" in text and "cpu -> cpu" in text and "started" not in text
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        check_profile("fast")
    with pytest.raises(ValueError, match="unknown profile"):
        RunConfig(profile="gpu")  # type: ignore[arg-type]


def test_seeding_is_reproducible() -> None:
    def draw() -> tuple:
        seed_everything(5)
        return np.random.rand(3).tolist(), torch.rand(3).tolist()

    assert draw() == draw()


def test_device_selection() -> None:
    assert select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert select_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            select_device("cuda")


def test_environment_yml_installs_the_pyproject_extras() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    line = next(ln for ln in (ROOT / "environment.yml").read_text().splitlines() if "-e ." in ln)
    listed = set(re.search(r"\[(.*)\]", line).group(1).split(","))
    assert listed == extras
    env = (ROOT / "environment.yml").read_text()
    assert "python=3.11" in env and "- pip" in env


def test_torch_ranges_admit_the_local_builds() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    from packaging.specifiers import SpecifierSet

    spec = {re.split(r"[<>=!~ ]", d)[0]: SpecifierSet(d[len(re.split(r"[<>=!~ ]", d)[0]):]) for d in deps}
    assert "2.14.1" in spec["torch"] and "0.29.1" in spec["torchvision"]


def test_the_data_seed_is_not_the_training_seed() -> None:
    run = RunConfig.from_params(PROFILE="smoke", DATA_SEED=3, SEED=1)
    assert (run.data_seed, run.seed, run.extra) == (3, 1, {})
    assert "data_seed" in run.describe()


@pytest.mark.parametrize("notebook", sorted(Path("book").glob("*/*.py")), ids=str)
def test_every_chapter_generates_its_data_from_DATA_SEED(notebook: Path) -> None:
    """`-p SEED 1` retrains on the same benchmark: corpora are loaded with DATA_SEED, never SEED."""
    text = notebook.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    calls = re.findall(r"(?:load_corpus|scenes_config)\([^)]*\)", code)  # the benchmark builds its own configs
    setups = re.findall(r"(?:chapter|hrem|book)_setup\(run\)", code)  # load with run.data_seed (tested below)
    assert "DATA_SEED = " in text and (calls or setups)
    assert all("seed=DATA_SEED" in call for call in calls), calls
    assert not setups or "DATA_SEED=DATA_SEED" in code  # the run that chapter_setup reads holds DATA_SEED


def test_chapter_setup_loads_the_corpus_of_the_data_seed(monkeypatch) -> None:
    from xmr_core.config import RunConfig
    from xmr_core.experiment import protocols

    seen = {}

    class Loaded(Exception):
        pass

    def fake_load_corpus(dataset, data_root, profile, **kwargs):
        seen.update(dataset=dataset, profile=profile, seed=kwargs["seed"])
        raise Loaded

    monkeypatch.setattr(protocols, "load_corpus", fake_load_corpus)
    with pytest.raises(Loaded):
        protocols.chapter_setup(RunConfig.from_params(PROFILE="smoke", SEED=5, DATA_SEED=2, PROGRESS=False))
    assert seen == {"dataset": "scenes", "profile": "smoke", "seed": 2}


def test_hrem_and_book_setups_load_the_corpus_of_the_data_seed(monkeypatch) -> None:
    from xmr_core.chapters import leaderboard
    from xmr_core.config import RunConfig
    from xmr_core.experiment import protocols

    seen = []

    class Loaded(Exception):
        pass

    def fake_load_corpus(dataset, data_root, profile, **kwargs):
        seen.append((dataset, profile, kwargs["seed"], kwargs.get("format")))
        raise Loaded

    run = RunConfig.from_params(PROFILE="smoke", SEED=5, DATA_SEED=2, PROGRESS=False)
    monkeypatch.setattr(protocols, "load_corpus", fake_load_corpus)
    with pytest.raises(Loaded):
        protocols.hrem_setup(run)
    monkeypatch.setattr(leaderboard, "chapter_setup", lambda r: ("corpus", "trunk", "grid", {"seed": r.data_seed}))
    with pytest.raises(Loaded):
        leaderboard.book_setup(run)  # the grid data from chapter_setup(run), then the region data of the same run
    assert seen == [("scenes", "smoke", 2, protocols.DATA_FORMAT)] * 2


def test_run_seeds_count_from_the_training_seed_and_smoke_keeps_one():
    from xmr_core.config import RunConfig

    assert RunConfig.from_params(PROFILE="cpu", SEED=4).seeds(3) == [4, 5, 6]
    assert RunConfig.from_params(PROFILE="smoke", SEED=4).seeds(3) == [4]
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        RunConfig.from_params(PROFILE="cpu").seeds(0)
