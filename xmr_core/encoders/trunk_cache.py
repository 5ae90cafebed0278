"""Where a pretrained trunk lives in the cache, and reading its weights back.

Apart from `xmr_core.encoders.trunk` (which pretrains the trunk and imports the scenes generator) so that
`encoders.image` can load a cached trunk without importing the module that imports it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from xmr_core.config import cache_dir


def trunk_dir(key: str) -> Path:
    return cache_dir() / "trunks" / key


def load_trunk_state(key: str) -> dict[str, Tensor]:
    """The cached trunk's state dict (`weights_only=True`); a missing or unreadable file is named."""
    path = trunk_dir(key) / "trunk.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: pretrained trunk {key!r} not in the cache; build it with "
                                f"xmr_core.encoders.trunk.pretrained_trunk")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
        raise RuntimeError(f"{path}: not a readable trunk state dict ({type(err).__name__}: {err})") from None
