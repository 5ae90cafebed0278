"""`packed_gru(rnn, packed)`: an `nn.GRU` run on a `PackedSequence` on the CPU, bit for bit the module's own
outputs and gradients, with a backward pass linear in the sequence length instead of quadratic.

ATen's CPU GRU on packed input (`PackedLayer` / `ReversedPackedLayer` in `aten/src/ATen/native/RNN.cpp`) takes the
input gates of the whole packed sequence in one linear layer, then steps through time, each step reading its rows
with `narrow`. Autograd's backward of each `narrow` fills a zero tensor the size of every step's gates and adds it into
the gradient: L steps cost L passes over all L steps' gates (profiled on one cpu VSE0 epoch, one thread: `fill_` and
`add_` 21% of the run, `SliceBackward0` 21% with its callees). Here the same computation takes each step's gates by
one `split` (one `cat` in the backward) and runs the same cell with the same operations in the same order, in place
where ATen's are (r = sigmoid(gh_r + gi_r), z = sigmoid(gh_z + gi_z), n = tanh(gi_n + gh_n r), h' = (h - n) z + n;
out of place, the elementwise kernels meet other memory layouts and round some values of small states differently
in the last bit), so the outputs,
final states and every gradient are equal to the module's (`tests/test_gru.py`); measured 1.28x faster on a whole
VSE0 training epoch. Sequences that ended keep their last state (forward direction); the backward direction starts
each sequence at its last token from a zero state, as the module does with no initial state.

`STEPS` = "module" runs the module's own forward instead (the reference, which `bench throughput`'s modes before
this change time). On another device the module's own kernels (cuDNN) run either way.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

GRUSteps = Literal["split", "module"]
STEPS: GRUSteps = "split"  # how `packed_gru` runs on the CPU: its steps split once, or the module's forward


def _cell(gates_in: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step, ATen's `GRUCell` with the input gates given, its operations (in place where its are, so that
    each kernel sees the same memory layout): gates_in (n, 3H), h (n, H) -> h' (n, H)."""
    gh_r, gh_z, gh_n = F.linear(h, w_hh, b_hh).unsafe_chunk(3, 1)
    gi_r, gi_z, gi_n = gates_in.unsafe_chunk(3, 1)
    r = gh_r.add_(gi_r).sigmoid_()
    z = gh_z.add_(gi_z).sigmoid_()
    n = gi_n.add(gh_n.mul_(r)).tanh_()
    return (h - n).mul_(z).add_(n)


def _direction(data: Tensor, sizes: list[int], rnn: nn.GRU, suffix: str) -> tuple[Tensor, Tensor]:
    """One direction of one layer of `rnn` (`suffix`: its weights' names' ending, e.g. "_l0_reverse") over packed
    `data` (sum(sizes), D) with `sizes` rows a step (decreasing): (outputs (sum(sizes), H) packed as the input, final
    states (sizes[0], H) in the packed order)."""
    w_hh, b_hh = getattr(rnn, f"weight_hh{suffix}"), getattr(rnn, f"bias_hh{suffix}", None)
    gates = F.linear(data, getattr(rnn, f"weight_ih{suffix}"), getattr(rnn, f"bias_ih{suffix}", None)).split(sizes)
    h = data.new_zeros(0, w_hh.shape[1])  # ATen's pre-computed input gates, taken by one split
    outputs: list[Tensor] = []
    if suffix.endswith("_reverse"):  # sequences join at their last token, from a zero state
        for t in range(len(sizes) - 1, -1, -1):
            if sizes[t] > len(h):
                h = torch.cat([h, h.new_zeros(sizes[t] - len(h), h.shape[1])])
            h = _cell(gates[t], h, w_hh, b_hh)
            outputs.append(h)
        return torch.cat(outputs[::-1]), h
    h, ended = h.new_zeros(sizes[0], h.shape[1]), []
    for t, n in enumerate(sizes):  # rows whose sequence ended leave h: their final state
        if n < len(h):
            ended.append(h[n:])
            h = h[:n]
        h = _cell(gates[t], h, w_hh, b_hh)
        outputs.append(h)
    return torch.cat(outputs), torch.cat([h, *ended[::-1]])


def packed_gru(rnn: nn.GRU, packed: PackedSequence) -> tuple[PackedSequence, Tensor]:
    """`rnn(packed)` with no initial state: (outputs packed as `packed` (sum of lengths, directions·H), final states
    (num_layers·directions, B, H) in the batch's order), bit for bit the module's (module docstring). A GRU with
    dropout between layers, in training, is refused (its draws are the module's own)."""
    if STEPS == "module" or packed.data.device.type != "cpu":
        return rnn(packed)
    if STEPS != "split":
        raise ValueError(f"gru.STEPS must be 'split' or 'module', got {STEPS!r}")
    if rnn.dropout > 0 and rnn.training and rnn.num_layers > 1:
        raise ValueError("packed_gru: a GRU with dropout between its layers trains through the module (rnn(packed))")
    sizes = packed.batch_sizes.tolist()
    data, finals = packed.data, []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in ("", "_reverse")[: 2 if rnn.bidirectional else 1]:
            out, final = _direction(data, sizes, rnn, f"_l{layer}{direction}")
            outputs.append(out)
            finals.append(final)
        data = torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0]
    h_n = torch.stack(finals)  # (layers·directions, B, H), packed (sorted) order
    if packed.unsorted_indices is not None:
        h_n = h_n.index_select(1, packed.unsorted_indices)
    return PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices), h_n
