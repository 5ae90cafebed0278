"""`xmr_core.optim.ForeachAdamP` computes the `adamp` package's AdamP update (the reference, run side by side)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from xmr_core.optim import ForeachAdamP

adamp = pytest.importorskip("adamp")


class _Net(nn.Module):
    """Matrices of 2 and 4 dims, vectors and a GRU: every kind of parameter AdamP treats, among them weights
    whose output is normalised per channel (the convolution) or as a whole (the last layer): scale-invariant,
    their gradients orthogonal to them, which AdamP projects."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(40, 8)
        self.conv = nn.Conv2d(1, 4, 3, bias=False)
        self.norm = nn.BatchNorm2d(4, affine=False)
        self.gru = nn.GRU(8, 6, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(12 + 4 * 4 * 4, 5, bias=False)

    def forward(self, tokens: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(self.embed(tokens))
        out = self.fc(torch.cat([h[0], h[1], self.norm(self.conv(images)).flatten(1)], 1))
        return torch.nn.functional.normalize(out.flatten(), dim=0).view_as(out)


def _batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.randint(0, 40, (7, 5), generator=generator), torch.randn(7, 1, 6, 6, generator=generator),
            torch.randn(7, 5, generator=generator) / 10)


def _step(net: _Net, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]) -> None:
    tokens, images, target = batch
    opt.zero_grad(set_to_none=True)
    ((net(tokens, images) - target) ** 2).sum().backward()
    opt.step()


def _train(opt_cls: type, steps: int, frozen_until: int = 0, **kw: object) -> tuple[nn.Module, torch.optim.Optimizer]:
    net = _Net()
    opt = opt_cls(net.parameters(), lr=1e-2, **kw)
    data = torch.Generator().manual_seed(1)
    for step in range(steps):
        net.embed.weight.requires_grad_(step >= frozen_until)  # PCME's frozen phase: some parameters lag behind
        _step(net, opt, _batch(data))
    return net, opt


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"nesterov": True}, {"delta": 1.0}])
def test_foreach_adamp_is_the_package_update(kw: dict) -> None:
    """Weights within 1e-5 after 12 steps of 1e-2 (a step moves a weight by up to lr / (1 - beta1) = 0.1): the
    projection's float noise reaches the next gradients, and Adam's first step of a lagging parameter divides a
    gradient by its own size (g / (|g| + eps)), so rows with gradients near eps differ in the 6th decimal."""
    ref, ref_opt = _train(adamp.AdamP, 12, frozen_until=4, **kw)
    new, new_opt = _train(ForeachAdamP, 12, frozen_until=4, **kw)
    for (name, a), b in zip(ref.named_parameters(), new.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=name)
    for a, b in zip(ref_opt.state.values(), new_opt.state.values()):
        assert a["step"] == b["step"]
        torch.testing.assert_close(b["exp_avg_sq"], a["exp_avg_sq"], rtol=1e-5, atol=1e-9)


def test_projection_is_exercised_both_ways() -> None:
    """The test above means something only when some weights are projected and some are not: the package's own
    decisions on the same run (wd_ratio 0.1: projected, 1: not)."""
    net = _Net()
    opt = adamp.AdamP(net.parameters(), lr=1e-2)
    decisions: list[float] = []
    original = opt._projection

    def spy(*args):
        out = original(*args)
        decisions.append(out[1])
        return out

    opt._projection = spy
    data = torch.Generator().manual_seed(1)
    for _ in range(3):
        _step(net, opt, _batch(data))
    assert 0.1 in decisions and 1 in decisions


def test_foreach_adamp_state_dict_loads_into_the_package() -> None:
    """A checkpoint's optimiser state is interchangeable: the package, resumed from ForeachAdamP's state, takes
    the same next step as ForeachAdamP itself."""
    net, opt = _train(ForeachAdamP, 5)
    twin = copy.deepcopy(net)
    ref_opt = adamp.AdamP(twin.parameters(), lr=1e-2)
    ref_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # load_state_dict keeps the tensors it is given
    batch = _batch(torch.Generator().manual_seed(2))
    _step(net, opt, batch)
    _step(twin, ref_opt, batch)
    for a, b in zip(twin.parameters(), net.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
