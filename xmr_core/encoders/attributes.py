"""The one supervised pretraining loop of the book's frozen encoders: attribute classification.

Both frozen encoders of the scenes benchmark are pretrained this way on the *pretraining set* (scenes
images from their own seed stream, disjoint from train / val / test; `scenes.generate_pretraining_set`),
as the papers' encoders start from ImageNet classifiers and a Visual Genome detector:

- the image trunk (`xmr_core.encoders.trunk`, the ImageNet analogue): per grid cell, the shape, colour and
  size of the object in it, or "empty";
- the region encoder (`xmr_core.data.regions`, the BUTD analogue): per crop, the shape, colour and size of
  the object it shows, or "background".

A network for this loop has `logits(x) -> list[Tensor]`, one `(B, ..., n_classes_t)` tensor per target t,
and the targets are int64 `(B, ..., T)`: target t of item b is `y[b, ..., t]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from tqdm import tqdm


@dataclass(frozen=True)
class AttributeTraining:
    """Schedule of the attribute classifier: Adam with a one-cycle lr over `steps` random batches."""

    steps: int = 300
    batch_size: int = 128
    lr: float = 3e-3
    seed: int = 0


def attribute_loss(logits: Sequence[Tensor], y: Tensor) -> Tensor:
    """Sum over targets of the mean cross-entropy; logits[t] (B, ..., C_t), y (B, ..., T) int64."""
    return sum(nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y[..., t].reshape(-1))
               for t, lg in enumerate(logits))


def fit_attribute_classifier(net: nn.Module, x: Tensor, y: Tensor, cfg: AttributeTraining,
                             desc: str = "pretrain", progress: bool = False) -> list[float]:
    """Train `net` on inputs x (N, ...) with targets y (N, ..., T); seeded. Returns the loss per step.

    The network is left in eval mode with gradients off (frozen), as every encoder pretrained here is.
    """
    if len(x) != len(y):
        raise ValueError(f"{desc}: {len(x)} inputs for {len(y)} targets")
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps)
    losses = []
    net.train()
    for _ in tqdm(range(cfg.steps), desc=desc, disable=not progress, leave=False):
        b = torch.randint(len(x), (cfg.batch_size,), generator=gen)
        loss = attribute_loss(net.logits(x[b].float()), y[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return losses


@torch.no_grad()
def attribute_accuracy(net: nn.Module, x: Tensor, y: Tensor, names: Sequence[str],
                       batch_size: int = 1024) -> dict[str, float]:
    """Accuracy (%) of each target over every item (and cell) of x (N, ...) with targets y (N, ..., T)."""
    correct = torch.zeros(len(names), dtype=torch.float64)
    for start in range(0, len(x), batch_size):
        logits = net.logits(x[start:start + batch_size].float())
        yb = y[start:start + batch_size]
        for t, lg in enumerate(logits):
            correct[t] += float((lg.argmax(-1) == yb[..., t]).sum())
    per_target = y[..., 0].numel()
    return {name: 100.0 * float(correct[t]) / per_target for t, name in enumerate(names)}
