"""An ensemble of trained models as one model for evaluation: the mean of their test-time similarity matrices (HREM's
"Full*", the standalone and fusion models of one seed), so that `run_evaluation.evaluate_run` scores it as it scores
any run and its record keeps its per-query values.

    ScoreMean(models)   -> a `RetrievalModel` (evaluation only): embeddings, one per member; score, their mean

Each member embeds the split as on its own and scores its own embeddings with its own `score`, so the ensemble's
scores are the mean of the members' score matrices as scored one by one, bit for bit (`tests/test_hrem_records.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from xmr_core.methods.base import RetrievalModel


class ScoreMean(RetrievalModel):
    """The mean of `models`' similarity matrices (evaluation only). Every member reads the same visual input and
    embeds each side as one tensor (N, ...); the ensemble's embedding of a side is the members' tensors, in order."""

    name = "score-mean"

    def __init__(self, models: Sequence[RetrievalModel]) -> None:
        super().__init__()
        if len(models) < 2:
            raise ValueError(f"ScoreMean: an ensemble needs at least two models, got {len(models)}")
        visual = {getattr(m, "visual", "auto") for m in models}
        if len(visual) > 1:
            raise ValueError(f"ScoreMean: the models read different visual inputs ({sorted(visual)})")
        if any(getattr(m, "directional", False) or getattr(m, "task", "pairs") != "pairs" for m in models):
            raise ValueError("ScoreMean: the members must score image-caption pairs the same both ways")
        self.members = nn.ModuleList(models)
        self.config = {"members": [m.name for m in models]}

    @property
    def visual(self) -> str:
        return getattr(self.members[0], "visual", "auto")

    def _each(self, embeddings: Sequence[object]) -> tuple[Tensor, ...]:
        if any(not isinstance(e, Tensor) for e in embeddings):
            raise ValueError("ScoreMean: every member must embed a side as one tensor")
        return tuple(embeddings)

    def encode_images(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return self._each([m.encode_images(batch) for m in self.members])

    def encode_captions(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return self._each([m.encode_captions(batch) for m in self.members])

    def score(self, img_emb: tuple[Tensor, ...], cap_emb: tuple[Tensor, ...]) -> Tensor:
        """(n_img, n_cap): the members' scores summed in order, divided by their number."""
        total = torch.stack([m.score(i, c) for m, i, c in zip(self.members, img_emb, cap_emb)]).sum(0)
        return total / len(self.members)
