"""The compared methods of the book: each method's tuned weight (its axis: name, paper default, step, hard bounds)
and how to build it, in one registry every chapter and the leaderboard read (`book_compared`). Every method is
tuned by the one protocol of `xmr_core.runs.tuning` (`training.tune_methods`), its weight axis declared here:

- The baselines (`BASELINES`: VSE0, PVSE, PCME μ-only, PCME), the PCME chapter's models, which every later
  zero-shot chapter compares against. VSE0 and PVSE are tuned on the hinge margin α (`MARGIN`: the papers' 0.2,
  step ×2, at most 2), PCME μ-only on its uniformity weight (PCME's CUB value 10, step ×10), PCME on its KL
  weight (the CUB value 1e-3, step ×10; `xmr_core.methods.pcme` says how it compares with the paper's).
- MSRM (`MSRM_COMPARED`): its γ (the paper's 0.8, step ×2). DVSE (`DVSE_COMPARED`, K = `DVSE_K`): the margin.
- HREM's chapter (`hrem_compared`): VSE++, GPO and HREM standalone / fusion, each on the hinge margin `MARGIN`,
  HREM with neighbour batches from epoch `NEIGHBOUR_FROM[budget(profile)]`.

HMRN's query-set models stay in `xmr_core.chapters.hmrn` (built from that chapter's query-set constants, trained
there only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmr_core.config import budget
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.dvse import DVSE, dvse_config
from xmr_core.methods.gpo import GPOModel, gpo_config
from xmr_core.methods.hrem import HREM, HREMConfig, hrem_config
from xmr_core.methods.msrm import MSRM, msrm_config
from xmr_core.methods.pcme import PCME, pcme_config
from xmr_core.methods.pvse import PVSE, pvse_config
from xmr_core.methods.vse import VSE, vse0_config, vse_pp_config
from xmr_core.runs.tuning import MAX_RUNS, Axis

MARGIN_BOUND = 2.0  # cosine scores: s(i, t) - s(i, t') <= 2, so at a margin >= 2 the hinge can no longer vanish
MARGIN = Axis("margin", 0.2, 2.0, high=MARGIN_BOUND)  # every hinge margin α: the papers' 0.2, step x2


@dataclass(frozen=True)
class Compared:
    """One compared method: its tuned weight's axis (`tuning.Axis`: name, paper default, step, hard bounds), how to
    build it, and its cap on tuning runs (`tuning.Search.max_runs`)."""

    name: str
    weight: Axis
    build: Callable[[dict, np.ndarray, float, int], RetrievalModel]  # (encoders, word vectors, weight, K)
    max_runs: int = MAX_RUNS

    @property
    def weight_name(self) -> str:
        return self.weight.name

    @property
    def default(self) -> float:
        return self.weight.default


def with_margin(cfg: Any, margin: float) -> Any:
    """`cfg` (any method config with a `hinge`) with the hinge margin α set: the tuned weight of every hinge loss."""
    return dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin))


def model_label(name: str, k: int = 1) -> str:
    """The table row of a compared method: PVSE rows carry their K."""
    return f"PVSE K={k}" if name == "PVSE" else name


# ---------------------------------------------------------------------------------------------- the baselines
def _vse0(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    return VSE(with_margin(vse0_config(**enc), margin), wv)


def _pvse(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    return PVSE(with_margin(pvse_config(n_embeds=k, hard_negatives=True, **enc), margin), wv)


def _mu_only(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, mu_only=True, uniformity_weight=weight), wv)


def _pcme(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, kl_weight=weight), wv)


BASELINES: dict[str, Compared] = {
    "VSE0": Compared("VSE0", MARGIN, _vse0),
    "PVSE": Compared("PVSE", MARGIN, _pvse),
    "PCME mu only": Compared("PCME mu only", Axis("uniformity weight", 10.0, 10.0), _mu_only),
    "PCME": Compared("PCME", Axis("KL weight", 1e-3, 10.0), _pcme),
}
# The baselines' trained models (name, K), in the paper's order of PCME's Tables 2 and 3.
BASELINE_SPECS: list[tuple[str, int]] = [("VSE0", 1), ("PVSE", 1), ("PVSE", 2), ("PVSE", 4), ("PCME mu only", 1),
                                         ("PCME", 1)]


# ---------------------------------------------------------------------------------------------- MSRM and DVSE
def _msrm(enc: dict, wv: np.ndarray, gamma: float, k: int) -> RetrievalModel:
    return MSRM(msrm_config(enc, gamma=gamma), wv)


MSRM_COMPARED = Compared("MSRM", Axis("gamma", 0.8, 2.0), _msrm)

DVSE_K = 6  # the paper's K for COCO and Flickr30K (CUB: 8)
REGIONS = "DVSE (regions)"  # the region-feature DVSE (the paper's Faster R-CNN rows) at the grid DVSE's setting


def _dvse(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    return DVSE(with_margin(dvse_config(n_embeds=DVSE_K, hard_negatives=True, **enc), margin), wv)


DVSE_COMPARED = Compared("DVSE", MARGIN, _dvse)


# ---------------------------------------------------------------------------------------------- HREM's chapter
NEIGHBOUR_FROM = {"smoke": 1, "cpu": 5, "paper": 15}  # first epoch (0-based) with neighbour batches


def _vse_pp(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    return VSE(with_margin(vse_pp_config(**enc), margin), wv)


def _gpo(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    return GPOModel(with_margin(gpo_config(enc), margin), wv)


def hrem_defaults(enc: dict, profile: str, mechanism: str = "fusion", **overrides: object) -> HREMConfig:
    """HREM at the paper's defaults on the chapter's encoders, neighbour batches from `NEIGHBOUR_FROM`."""
    return hrem_config(enc, mechanism=mechanism, neighbour_from_epoch=NEIGHBOUR_FROM[budget(profile)],
                       **overrides)


def _hrem(mechanism: str, profile: str) -> Callable[[dict, np.ndarray, float, int], RetrievalModel]:
    def build(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
        return HREM(with_margin(hrem_defaults(enc, profile, mechanism), margin), wv)
    return build


def hrem_compared(profile: str) -> dict[str, Compared]:
    """The four trained models of HREM's Tables 1-2, each tuned on its margin (`MARGIN`, the same axis for all)."""
    builders = {"VSE++": _vse_pp, "GPO": _gpo, "HREM standalone": _hrem("standalone", profile),
                "HREM fusion": _hrem("fusion", profile)}
    return {name: Compared(name, MARGIN, build) for name, build in builders.items()}


# ---------------------------------------------------------------------------------------------- the registry
def book_compared(profile: str) -> dict[str, Compared]:
    """Every compared method of the book by name: the baselines, MSRM, DVSE and HREM's chapter's models."""
    return {**BASELINES, "MSRM": MSRM_COMPARED, "DVSE": DVSE_COMPARED, **hrem_compared(profile)}
