"""Typed run configuration: the three profiles, seeding and device selection.

Every notebook starts from a parameters cell of plain literals; `RunConfig.from_params` turns it into a
typed config, and `RunConfig.describe()` is what the notebook prints as its effective configuration.
Method configs (one dataclass per method, with each paper's hyperparameters) live beside their methods
and take a `Profile` to pick their sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

Profile = Literal["smoke", "cpu", "paper", "paper-smoke"]
PROFILES: tuple[str, ...] = ("smoke", "cpu", "paper", "paper-smoke")

PROFILE_PURPOSE: dict[str, str] = {
    "smoke": "tiny scenes: every code path of the notebook runs (CI), under a minute a notebook",
    "cpu": "scenes benchmark: real training, real tables and figures on a laptop CPU (the default)",
    "paper": "real data at DATA_ROOT with the paper's hyperparameters, on a GPU",
    "paper-smoke": "the paper profile's code path on the real data at DATA_ROOT with the smoke budget (a few steps, "
                   "one seed, one tuning point; the trunk may lack its ImageNet weights, labelled): checks a whole "
                   "chapter in minutes before the GPU job",
}


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return profile


def budget(profile: str) -> str:
    """The profile whose budget a run takes (epochs, seeds, tuning and ablation grids, sizes): paper-smoke
    takes smoke's, every other profile its own."""
    return "smoke" if check_profile(profile) == "paper-smoke" else profile


def recipe(profile: str) -> str:
    """The profile whose code path a run takes (the data it reads, the trunk, the encoders' kinds): paper-smoke
    takes paper's, every other profile its own."""
    return "paper" if check_profile(profile) == "paper-smoke" else profile


def seed_everything(seed: int) -> torch.Generator:
    """Seed python, numpy and torch (CPU and CUDA); return a torch generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block on `n` torch CPU threads (the caller's count restored after): torch's CPU kernels split
    their sums by thread count, so what a block computes depends on it (`TrainConfig.threads`, `one_thread`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_thread() -> contextlib.AbstractContextManager[None]:
    """`torch_threads(1)`: a result cached and fingerprinted into run keys (the pretrained trunk, its grid
    features, the region features) must not depend on how many cores the machine that made it had."""
    return torch_threads(1)


def select_device(name: str = "auto") -> torch.device:
    """`auto` = CUDA when present, else CPU; `cpu`, `cuda`, `cuda:1` are taken as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"DEVICE={name!r} was asked for, but torch sees no CUDA device")
    return device


def cache_dir() -> Path:
    """Where generated data and trained checkpoints are cached (`XMR_CACHE`, default ~/.cache/xmr)."""
    return Path(os.environ.get("XMR_CACHE", Path.home() / ".cache" / "xmr"))


def project_root() -> Path:
    """The checkout this library runs from: the nearest parent of the cwd (or of this package) with
    `pyproject.toml` and `xmr_core/`."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "pyproject.toml").is_file() and (folder / "xmr_core").is_dir():
                return folder
    return Path.cwd()


@dataclass
class RunConfig:
    """What every notebook's parameters cell sets."""

    profile: Profile = "cpu"
    dataset: str = "scenes"
    data_root: str = ""
    seed: int = 0  # the training seed (model initialisation, batches, augmentation)
    data_seed: int = 0  # the benchmark's generation seed (scenes and its class split); fixed across training seeds
    device: str = "auto"
    results_dir: str = ""  # empty: the profile's and data set's own folder (`results.results_folder`)
    progress: bool = True
    # the encoders (`experiment.paper_encoders`): empty = the paper's; IMAGE_WEIGHTS "none" = no ImageNet weights
    backbone: str = ""
    image_weights: str = ""
    word_vectors: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    encoders: dict[str, str] = field(default_factory=dict)  # what the chapter's setup used, for provenance
    started: float = field(default_factory=time.time, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_profile(self.profile)

    @classmethod
    def from_params(cls, **params: Any) -> RunConfig:
        """Build from notebook parameters (upper- or lower-case names); unknown names go to `extra`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "started", "encoders"}
        known, extra = {}, {}
        for key, value in params.items():
            (known if key.lower() in names else extra)[key.lower()] = value
        return cls(**known, extra=extra)

    @property
    def torch_device(self) -> torch.device:
        return select_device(self.device)

    def elapsed_s(self) -> float:
        """Seconds since this config was made (the notebook's start)."""
        return time.time() - self.started

    def seeds(self, n_seeds: int) -> list[int]:
        """The training seeds a chapter trains each compared model with: `n_seeds` consecutive seeds from
        `seed` (smoke: the first only)."""
        if n_seeds < 1:
            raise ValueError(f"n_seeds must be >= 1, got {n_seeds}")
        return [self.seed + k for k in range(1 if budget(self.profile) == "smoke" else n_seeds)]

    def describe(self) -> str:
        """One line per effective value, for the executed notebook."""
        rows = dataclasses.asdict(self)
        rows.pop("started")
        rows["device"] = f"{self.device} -> {self.torch_device}"
        rows["profile"] = f"{self.profile} ({PROFILE_PURPOSE[self.profile]})"
        width = max(map(len, rows))
        return "\n".join(f"{k:<{width}} = {v}" for k, v in rows.items())
