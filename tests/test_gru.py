"""`encoders.gru.packed_gru`: an `nn.GRU` on a packed batch, on the CPU, equal to the module's own forward bit for bit,
in its outputs, final states and every gradient (the BiGRU caption encoder trains through it, so a run learns the same
weights as through the module)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from xmr_core.encoders import gru
from xmr_core.encoders.text import BiGRUTextEncoder, TextEncoderConfig


def _outputs_and_grads(rnn: nn.GRU, x: torch.Tensor, lengths: torch.Tensor, run) -> list[torch.Tensor]:
    """Outputs, final states, and the gradients of the input and every weight of a fixed random loss."""
    rnn.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    out, h_n = run(rnn, pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    g = torch.Generator().manual_seed(1)
    loss = (out.data * torch.randn(out.data.shape, generator=g)).sum() + (h_n * torch.randn(h_n.shape, generator=g)).sum()
    loss.backward()
    return [out.data, out.batch_sizes, h_n, x.grad] + [p.grad for p in rnn.parameters()]


@pytest.mark.parametrize("layers, bidirectional, bias", [(1, True, True), (2, True, True), (2, False, True),
                                                         (1, True, False)])
def test_packed_gru_is_the_modules_forward_and_backward_bit_for_bit(layers, bidirectional, bias) -> None:
    torch.manual_seed(0)
    rnn = nn.GRU(7, 5, num_layers=layers, bidirectional=bidirectional, bias=bias, batch_first=True)
    lengths = torch.tensor([3, 9, 1, 9, 4, 2, 1, 6])  # unsorted, ties, single words
    x = torch.randn(len(lengths), 9, 7)
    with torch.random.fork_rng():
        torch.set_num_threads(1)
        mine = _outputs_and_grads(rnn, x, lengths, gru.packed_gru)
        module = _outputs_and_grads(rnn, x, lengths, lambda r, p: r(p))
    assert len(mine) == len(module) == 4 + len(list(rnn.parameters()))
    for a, b in zip(mine, module):
        assert a.shape == b.shape and torch.equal(a, b)


def test_the_caption_encoder_learns_through_packed_gru_as_through_the_module(monkeypatch) -> None:
    """A few Adam steps of the BiGRU caption encoder: the same weights, bit for bit, with `STEPS` "split" and
    "module" (the reference)."""
    vectors = np.random.default_rng(0).normal(size=(12, 6)).astype(np.float32)
    g = torch.Generator().manual_seed(3)
    batches = [{"tokens": torch.randint(1, 12, (6, 8), generator=g), "lengths": torch.randint(1, 9, (6,), generator=g)}
               for _ in range(3)]
    weights = {}
    for steps in ("split", "module"):
        monkeypatch.setattr(gru, "STEPS", steps)
        torch.manual_seed(0)
        encoder = BiGRUTextEncoder(vectors, embed_dim=4, config=TextEncoderConfig(hidden=5))
        opt = torch.optim.Adam(encoder.parameters(), lr=0.1)
        for batch in batches:
            out = encoder(batch)
            opt.zero_grad()
            (out.global_.square().sum() + out.local.sum()).backward()
            opt.step()
        weights[steps] = encoder.state_dict()
    assert all(torch.equal(weights["split"][k], weights["module"][k]) for k in weights["module"])
    monkeypatch.setattr(gru, "STEPS", "loop")
    with pytest.raises(ValueError, match="gru.STEPS must be 'split' or 'module'"):
        encoder(batches[0])


def test_dropout_between_layers_is_refused_in_training() -> None:
    rnn = nn.GRU(3, 2, num_layers=2, dropout=0.5, batch_first=True)
    packed = pack_padded_sequence(torch.randn(2, 4, 3), torch.tensor([4, 2]), batch_first=True)
    with pytest.raises(ValueError, match="dropout between its layers"):
        gru.packed_gru(rnn, packed)
    rnn.eval()
    assert torch.equal(gru.packed_gru(rnn, packed)[1], rnn(packed)[1])
