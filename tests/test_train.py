"""The training loop: determinism, resume, checkpoints, run cache, phases, schedules, DDP sharding."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from fixtures.corpora import word_split

from xmr_core import losses as L
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.distributed import DistEnv, ShardedSampler
from xmr_core.runs.train import (
    CheckpointError,
    TrainConfig,
    earliest_patience_stop,
    fit,
    load_checkpoint,
    lr_factor,
    run_key,
    save_checkpoint,
    state_fingerprint,
)

TRAIN, VAL = word_split("train", 24, 0), word_split("val", 8, 1)
VOCAB = Vocabulary.build(TRAIN.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)
CFG = TrainConfig(epochs=2, batch_size=8, progress=False, device="cpu")


def _model(seed: int = 0, embed_dim: int = 8) -> VSE:
    torch.manual_seed(seed)
    cfg = vse0_config(embed_dim=embed_dim, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                      text=TextEncoderConfig(hidden=4))
    return VSE(cfg, VECTORS)


def _val_r1(model: VSE, split: Split) -> dict[str, float]:
    """Independent validation for these tests: instance t2i R@1 and the score spread, by brute force."""
    from xmr_core.data.datasets import caption_loader, image_loader

    with torch.no_grad():
        img = torch.cat([model.encode_images(b) for b in image_loader(split, 64)])
        cap = torch.cat([model.encode_captions(b) for b in caption_loader(split, VOCAB, 64)])
        s = model.score(img, cap)
    hits = [int(s[:, j].argmax()) == int(split.caption_image[j]) for j in range(split.n_captions)]
    return {"rsum": 100.0 * float(np.mean(hits)), "spread": float(s.std())}


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same_history(a: list[dict], b: list[dict]) -> bool:
    timing = ("train_seconds", "pairs_per_second")
    strip = [[{k: v for k, v in row.items() if k not in timing} for row in h] for h in (a, b)]
    return strip[0] == strip[1]


def test_same_seed_same_weights_and_metrics(tmp_path) -> None:
    a, b = _model(), _model()  # validated by xmr_core.evaluate.evaluate_model (the default)
    ra = fit(a, TRAIN, VAL, CFG, tmp_path / "a", vocab=VOCAB)
    rb = fit(b, TRAIN, VAL, CFG, tmp_path / "b", vocab=VOCAB)
    assert _same_history(ra.history, rb.history) and len(ra.history) == 2
    assert "val/instance/t2i/R@1" in ra.history[0] and ra.best_score == ra.best_metrics["rsum"]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert ra.pairs_per_second > 0 and (tmp_path / "a" / "metrics.csv").is_file()
    # a different seed changes the run
    rc = fit(_model(), TRAIN, VAL, TrainConfig(**{**CFG.__dict__, "seed": 1}), tmp_path / "c", vocab=VOCAB)
    assert not _same_history(ra.history, rc.history)


def test_resume_after_interruption_equals_uninterrupted_run(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 3})
    full = _model()
    r_full = fit(full, TRAIN, VAL, cfg, tmp_path / "full", vocab=VOCAB, validate=_val_r1)

    class Stop(Exception):
        pass

    def stop_after_first(epoch: int, row: dict) -> None:
        if epoch == 0:
            raise Stop

    part = _model()
    with pytest.raises(Stop):
        fit(part, TRAIN, VAL, cfg, tmp_path / "part", vocab=VOCAB, validate=_val_r1, on_epoch_end=stop_after_first)
    assert load_checkpoint(tmp_path / "part" / "last.pt")["epoch"] == 1
    resumed = _model()  # the same run: the same model before training (a different one is refused, below)
    torch.manual_seed(123)  # the resumed run must not depend on the RNG state of the new process
    r_res = fit(resumed, TRAIN, VAL, cfg, tmp_path / "part", resume=True, vocab=VOCAB, validate=_val_r1)
    assert _same_history(r_full.history, r_res.history)
    assert r_full.best_epoch == r_res.best_epoch
    for (k, x), y in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(x, y), k


def test_corrupt_or_foreign_checkpoint_is_a_one_line_error(tmp_path) -> None:
    run = tmp_path / "run"
    fit(_model(), TRAIN, VAL, CFG, run, vocab=VOCAB, validate=_val_r1)
    (run / "result.json").unlink()  # pretend the run was interrupted
    data = (run / "last.pt").read_bytes()
    (run / "last.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as err:
        fit(_model(), TRAIN, VAL, CFG, run, resume=True, vocab=VOCAB, validate=_val_r1)
    assert str(run / "last.pt") in str(err.value) and "\n" not in str(err.value)
    (run / "last.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(run / "last.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(run / "missing.pt")


def test_finished_run_is_loaded_not_retrained(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    first = _model()
    r1 = fit(first, TRAIN, VAL, CFG, vocab=VOCAB, validate=_val_r1)
    assert r1.run_dir.parent == tmp_path / "cache" / "runs" and not r1.cached
    epochs_run: list[int] = []
    again = _model()  # the same model before training: the same run
    r2 = fit(again, TRAIN, VAL, CFG, vocab=VOCAB, validate=_val_r1, on_epoch_end=lambda e, r: epochs_run.append(e))
    assert r2.cached and epochs_run == [] and r2.run_dir == r1.run_dir
    assert r2.best_metrics == r1.best_metrics
    assert all(torch.equal(x, y) for x, y in zip(first.state_dict().values(), again.state_dict().values()))
    # the key changes with the method config, the initial state, the train config, the seed and the data
    base = run_key(_model(), TRAIN, VAL, CFG)
    assert run_key(_model(seed=5), TRAIN, VAL, CFG) != base  # other initial weights
    other_vectors = VECTORS.copy()
    other_vectors[3, 0] += 1.0  # one word vector changed (its source changed): the config is the same
    torch.manual_seed(0)
    changed = VSE(_model().config, other_vectors)
    assert changed.config == _model().config and run_key(changed, TRAIN, VAL, CFG) != base
    assert run_key(_model(), TRAIN, VAL, TrainConfig(**{**CFG.__dict__, "seed": 3})) != base
    assert run_key(_model(), TRAIN, VAL, TrainConfig(**{**CFG.__dict__, "lr": 1e-3})) != base
    assert run_key(_model(embed_dim=6), TRAIN, VAL, CFG) != base
    assert run_key(_model(), word_split("train", 24, 9), VAL, CFG) != base
    assert run_key(_model(), TRAIN, VAL, TrainConfig(**{**CFG.__dict__, "progress": True})) == base


def test_fit_returns_the_weights_its_result_describes_or_refuses(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 3})
    states: list[str] = []
    trained = _model()
    result = fit(trained, TRAIN, VAL, cfg, vocab=VOCAB, validate=_scripted([1.0, 3.0, 2.0])[0],
                 on_epoch_end=lambda e, row: states.append(state_fingerprint(trained)))
    assert result.best_epoch == 2 and result.best_state == states[1] == state_fingerprint(trained) != states[2]
    again = _model()
    cached = fit(again, TRAIN, VAL, cfg, vocab=VOCAB, validate=_scripted([])[0])
    assert cached.cached and cached.best_state == result.best_state == state_fingerprint(again)
    best = load_checkpoint(result.run_dir / "best.pt")
    last = load_checkpoint(result.run_dir / "last.pt")
    save_checkpoint(result.run_dir / "best.pt", {**best, "epoch": 3})  # another epoch's file
    with pytest.raises(CheckpointError, match="epoch 3 .* describes epoch 2"):
        fit(_model(), TRAIN, VAL, cfg, vocab=VOCAB, validate=_scripted([])[0])
    save_checkpoint(result.run_dir / "best.pt", {**best, "model": last["model"]})  # other weights, same epoch
    with pytest.raises(CheckpointError, match="not the ones .*result.json describes"):
        fit(_model(), TRAIN, VAL, cfg, vocab=VOCAB, validate=_scripted([])[0])


def test_resume_with_another_initial_model_is_refused(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 1})
    fit(_model(), TRAIN, VAL, cfg, tmp_path / "part", vocab=VOCAB, validate=_val_r1)
    (tmp_path / "part" / "result.json").unlink()  # as if the run had been interrupted after its epoch
    with pytest.raises(CheckpointError, match="belongs to another run"):
        fit(_model(seed=5), TRAIN, VAL, cfg, tmp_path / "part", resume=True, vocab=VOCAB, validate=_val_r1)


def test_out_dir_of_another_run_is_refused(tmp_path) -> None:
    fit(_model(), TRAIN, VAL, CFG, tmp_path / "run", vocab=VOCAB, validate=_val_r1)
    other = TrainConfig(**{**CFG.__dict__, "lr": 1e-3})
    with pytest.raises(CheckpointError, match="different run"):
        fit(_model(), TRAIN, VAL, other, tmp_path / "run", vocab=VOCAB, validate=_val_r1)


def test_lr_schedules_by_hand() -> None:
    cos = TrainConfig(epochs=4, scheduler="cosine")
    # 0.5 (1 + cos(pi t / 4)) for t = 0..3
    assert [round(lr_factor(e, cos), 6) for e in range(4)] == [1.0, round(0.5 * (1 + math.sqrt(0.5)), 6), 0.5,
                                                                round(0.5 * (1 - math.sqrt(0.5)), 6)]
    step = TrainConfig(epochs=5, scheduler="step", step_epochs=2, step_gamma=0.1)
    assert [lr_factor(e, step) for e in range(5)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])
    # PCME two phases: 2 frozen epochs (cosine over 2), then 2 end-to-end epochs (cosine over 2) × 0.1
    two = TrainConfig(epochs=4, scheduler="cosine", frozen_epochs=2, finetune_lr_mult=0.1)
    assert [lr_factor(e, two) for e in range(4)] == pytest.approx([1.0, 0.5, 0.1, 0.05])


def test_frozen_phase_keeps_backbones_fixed(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 2, "frozen_epochs": 1, "scheduler": "constant",
                         "finetune_lr_mult": 0.5})
    model = _model()
    before = [p.detach().clone() for p in model.backbone_parameters()]
    lrs, after_phase1 = [], []

    def record(epoch: int, row: dict) -> None:
        lrs.append(row["lr"])
        if epoch == 0:
            after_phase1.extend(p.detach().clone() for p in model.backbone_parameters())

    result = fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1, on_epoch_end=record)
    assert all(torch.equal(a, b) for a, b in zip(before, after_phase1))
    phase2 = load_checkpoint(tmp_path / "run" / "last.pt")["model"]
    assert not torch.equal(phase2["image_encoder.net.features.0.weight"], before[0])
    assert lrs == pytest.approx([cfg.lr, cfg.lr * 0.5])
    assert [row["phase"] for row in result.history] == ["frozen", "end-to-end"]


def test_non_finite_loss_stops_the_run(tmp_path) -> None:
    model = _model()

    def bad_loss(img, cap, batch):
        return (img.sum() * float("nan")), {"hinge": float("nan")}

    model.loss = bad_loss  # type: ignore[method-assign]
    with pytest.raises(FloatingPointError, match="epoch 1 step 1"):
        fit(model, TRAIN, VAL, CFG, tmp_path / "run", vocab=VOCAB, validate=_val_r1)


def _diverging_at_epoch_2(model: VSE) -> VSE:
    """`model` whose loss turns NaN once the first epoch's 3 steps (24 pairs, batch 8) are done."""
    calls, loss = [0], model.loss

    def loss_then_nan(img, cap, batch):
        calls[0] += 1
        value, parts = loss(img, cap, batch)
        return (value * float("nan"), parts) if calls[0] > 3 else (value, parts)

    model.loss = loss_then_nan  # type: ignore[method-assign]
    return model


def test_non_finite_loss_can_end_the_run_as_diverged(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 3, "on_nonfinite": "stop"})
    model = _diverging_at_epoch_2(_model())
    result = fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1)
    assert result.stopped == "diverged" and not result.converged
    assert "epoch 2 step 1" in result.stop_message and len(result.history) == 1 and result.best_epoch == 1
    best = load_checkpoint(tmp_path / "run" / "best.pt")["model"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in best.items())  # the weights before the NaN
    again = fit(_model(), TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1)
    assert again.cached and again.stopped == "diverged" and again.stop_message == result.stop_message
    with pytest.raises(FloatingPointError, match="epoch 2 step 1"):  # the default policy: a diverged run raises
        fit(_model(), TRAIN, VAL, TrainConfig(**{**cfg.__dict__, "on_nonfinite": "raise"}), tmp_path / "run",
            vocab=VOCAB, validate=_val_r1)


def test_a_loss_that_meets_a_non_finite_input_ends_the_run_as_diverged(tmp_path) -> None:
    """PCME's soft contrastive loss raises `FloatingPointError` on non-finite logits (a diverged forward pass):
    `fit` treats it as a non-finite loss, naming the loss's error."""
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 3, "on_nonfinite": "stop"})
    model, calls = _model(), [0]

    def loss_then_raise(img, cap, batch):
        calls[0] += 1
        if calls[0] > 3:
            L.soft_contrastive_nll(torch.full((1, 2, 2), float("nan")), torch.tensor([True]))
        return model.__class__.loss(model, img, cap, batch)

    model.loss = loss_then_raise  # type: ignore[method-assign]
    result = fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1)
    assert result.stopped == "diverged" and result.best_epoch == 1 and not result.converged
    assert "epoch 2 step 1" in result.stop_message and "non-finite logits" in result.stop_message


def test_non_finite_loss_in_the_first_epoch_raises_even_when_asked_to_stop(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "on_nonfinite": "stop"})
    model = _model()
    model.loss = lambda img, cap, batch: (img.sum() * float("nan"), {})  # type: ignore[method-assign]
    with pytest.raises(FloatingPointError, match="epoch 1 step 1"):  # no epoch finished: nothing to keep
        fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1)


def test_adamp_optimizer_trains(tmp_path) -> None:
    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 1, "optimizer": "adamp"})
    assert fit(_model(), TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=_val_r1).best_epoch == 1


class _ListSampler(torch.utils.data.Sampler[int]):
    def __init__(self, order: list[int]) -> None:
        self.order, self.epoch = order, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        return iter(self.order)


def test_sharded_sampler_splits_the_epoch_order_across_ranks() -> None:
    base = _ListSampler([10, 11, 12, 13, 14, 15, 16])  # 7 items over 3 ranks -> 3 each, padded by wrapping
    shards = [list(ShardedSampler(base, DistEnv(rank=r, world_size=3))) for r in range(3)]
    assert shards == [[10, 13, 16], [11, 14, 10], [12, 15, 11]]
    assert list(ShardedSampler(base, DistEnv())) == base.order  # single process: the base order itself
    ShardedSampler(base, DistEnv()).set_epoch(4)
    assert base.epoch == 4


def _ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from xmr_core.runs.distributed import cleanup_distributed, init_distributed

    torch.set_num_threads(1)
    init_distributed("cpu")
    model = _model()

    def save_parameters(epoch: int, row: dict) -> None:  # after the last step, before the best weights load
        params = {k: v.detach().clone() for k, v in model.named_parameters()}
        torch.save({"params": params, "pairs": row["pairs_per_second"] * row["train_seconds"]},
                   os.path.join(out, f"rank{rank}-epoch{epoch}.pt"))

    cfg = TrainConfig(**{**CFG.__dict__, "epochs": 1})
    fit(model, TRAIN, VAL, cfg, os.path.join(out, "run"), vocab=VOCAB, validate=_val_r1, on_epoch_end=save_parameters)
    cleanup_distributed()


@pytest.mark.slow
def test_ddp_two_cpu_processes_agree_and_rank0_writes(tmp_path) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(tmp_path / "rank0-epoch0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1-epoch0.pt", weights_only=True)
    start = _model().state_dict()
    for k, v in r0["params"].items():  # gradients were averaged: the ranks moved together, and moved
        assert torch.allclose(v, r1["params"][k], atol=1e-6), k
    assert not torch.equal(r0["params"]["text_encoder.fc.weight"], start["text_encoder.fc.weight"])
    # each rank saw its half of the epoch; the pair count is summed over ranks: 24 images, one caption each
    assert round(r0["pairs"]) == 24
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "metrics.csv").is_file()
    assert len(load_checkpoint(tmp_path / "run" / "last.pt")["history"]) == 1


# ------------------------------------------------------------------ early stopping (TrainConfig.patience)
# A scripted validation score (the `validate=` hook), so the stopping epoch is known by hand.

RISE_THEN_FLAT = [10.0, 20.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]


def _stopping_cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"epochs": 10, "patience": 2, "batch_size": 8, "progress": False, "device": "cpu", **kw})


def _scripted(scores: list[float]):
    """validate(model, split) -> {"rsum": scores[epoch]}, the epoch counted by the calls; records them."""
    calls: list[float] = []

    def validate(model, split) -> dict[str, float]:
        calls.append(scores[len(calls)])
        return {"rsum": calls[-1]}

    return validate, calls


def _run(scores: list[float], out_dir, **kw):
    validate, calls = _scripted(scores)
    states: list[dict[str, torch.Tensor]] = []
    model = _model()
    result = fit(model, TRAIN, VAL, _stopping_cfg(**kw), out_dir, vocab=VOCAB, validate=validate,
                 on_epoch_end=lambda e, row: states.append({k: v.clone() for k, v in model.state_dict().items()}))
    return model, result, calls, states


def test_stops_patience_epochs_after_the_best(tmp_path) -> None:
    # rsum 10, 20, 30, 30, ...: best at epoch 3 (a tie is no improvement), epochs 4 and 5 bring nothing,
    # so with patience 2 the run stops after epoch 5 = best epoch + patience
    model, result, calls, states = _run(RISE_THEN_FLAT, tmp_path / "run")
    assert result.best_epoch == 3 and result.best_score == 30.0
    assert len(result.history) == 5 and len(calls) == 5 and len(states) == 5
    assert [row["epoch"] for row in result.history] == [1, 2, 3, 4, 5]
    assert [row["val/rsum"] for row in result.history] == RISE_THEN_FLAT[:5]
    assert result.stopped == "patience" and result.converged is True and not result.cached
    # the best epoch's weights are restored, not the last epoch's
    best, last = states[2], states[4]
    assert all(torch.equal(v, best[k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, last[k]) for k, v in model.state_dict().items())

    # a second call on the same run directory loads the finished run, stopping reason included
    again_validate, again_calls = _scripted(RISE_THEN_FLAT)
    epochs_run: list[int] = []
    again = fit(_model(), TRAIN, VAL, _stopping_cfg(), tmp_path / "run", vocab=VOCAB, validate=again_validate,
                on_epoch_end=lambda e, row: epochs_run.append(e))
    assert again.cached and epochs_run == [] and again_calls == []
    assert again.stopped == "patience" and again.converged is True
    assert again.best_epoch == 3 and len(again.history) == 5


def test_an_improvement_resets_the_count(tmp_path) -> None:
    # best at 1, 2, then 3 is no better (1 epoch without), 4 improves (count reset), 5 and 6 do not: stop after 6
    _, result, calls, _ = _run([10.0, 20.0, 20.0, 25.0, 24.0, 25.0, 99.0, 99.0, 99.0, 99.0], tmp_path / "run")
    assert result.best_epoch == 4 and result.best_score == 25.0
    assert len(result.history) == 6 and len(calls) == 6
    assert result.stopped == "patience" and result.converged


def test_min_delta_counts_only_improvements_larger_than_it(tmp_path) -> None:
    # min_delta 1, patience 2: epoch 1 (10) and 2 (20) count; 20.5 and 20.8 beat 20 by less than 1, so epochs 3
    # and 4 bring nothing and the run stops after epoch 4; the best checkpoint is still the highest score (20.8)
    model, result, calls, states = _run([10.0, 20.0, 20.5, 20.8, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0],
                                        tmp_path / "run", min_delta=1.0)
    assert len(result.history) == 4 and len(calls) == 4
    assert result.best_epoch == 4 and result.best_score == 20.8
    assert result.stopped == "patience" and result.converged
    assert all(torch.equal(v, states[3][k]) for k, v in model.state_dict().items())


def test_patience_zero_trains_every_epoch(tmp_path) -> None:
    _, result, calls, _ = _run(RISE_THEN_FLAT, tmp_path / "run", patience=0)
    assert len(result.history) == 10 and len(calls) == 10
    # every epoch ran, and the best (3) is not the last (10): converged by the schedule, not by patience
    assert result.best_epoch == 3 and result.stopped == "max_epochs" and result.converged is True
    again = fit(_model(), TRAIN, VAL, _stopping_cfg(patience=0), tmp_path / "run", vocab=VOCAB,
                validate=_scripted(RISE_THEN_FLAT)[0])
    assert again.cached and again.stopped == "max_epochs" and again.converged is True


def test_still_improving_at_the_last_epoch_is_not_converged(tmp_path) -> None:
    _, result, _, _ = _run([1.0, 2.0, 3.0, 4.0], tmp_path / "run", epochs=4)
    assert len(result.history) == 4 and result.best_epoch == 4
    assert result.stopped == "max_epochs" and not result.converged


def test_patience_never_stops_a_run_in_the_first_patience_after_of_its_schedule(tmp_path) -> None:
    # the same plateau as above (best at epoch 3): patience 2 alone stops after epoch 5; with patience_after 0.5 of
    # 10 epochs it may stop only from epoch ceil(5) + 2 = 7 on, and 7 - 3 >= 2: it stops after epoch 7
    _, result, calls, _ = _run(RISE_THEN_FLAT, tmp_path / "run", patience_after=0.5)
    assert len(result.history) == 7 and len(calls) == 7
    assert result.best_epoch == 3 and result.stopped == "patience" and result.converged
    # an improvement in the first half that patience alone would have missed (it stops after epoch 5): best at 6,
    # then 7 and 8 bring nothing, so the run stops after epoch 8 = 6 + 2 (>= the earliest, 7)
    rise_late = [10.0, 20.0, 30.0, 30.0, 30.0, 35.0, 35.0, 35.0, 35.0, 35.0]
    _, alone, _, _ = _run(rise_late, tmp_path / "alone")
    _, late, _, _ = _run(rise_late, tmp_path / "late", patience_after=0.5)
    assert (alone.best_epoch, len(alone.history)) == (3, 5)
    assert (late.best_epoch, len(late.history), late.best_score) == (6, 8, 35.0) and late.stopped == "patience"


def test_earliest_patience_stop_by_hand() -> None:
    assert earliest_patience_stop(_stopping_cfg(epochs=20, patience=3, patience_after=0.5)) == 13  # the cpu recipe
    assert earliest_patience_stop(_stopping_cfg(epochs=10, patience=2, patience_after=0.25)) == 5  # ceil(2.5) + 2
    assert earliest_patience_stop(_stopping_cfg(epochs=10, patience=2)) == 2  # from the first epochs on, as before
    with pytest.raises(ValueError, match="patience_after must be in"):
        _stopping_cfg(patience_after=1.0)


def test_patience_after_enters_the_run_key() -> None:
    # a run under the rule learns for other epochs than one without it: another run directory
    assert run_key(_model(), TRAIN, VAL, _stopping_cfg(patience_after=0.5)) != run_key(_model(), TRAIN, VAL,
                                                                                         _stopping_cfg())


def test_negative_patience_or_min_delta_is_refused() -> None:
    with pytest.raises(ValueError, match="patience"):
        _stopping_cfg(patience=-1)
    with pytest.raises(ValueError, match="min_delta"):
        _stopping_cfg(min_delta=-0.5)


def test_the_last_epoch_best_by_a_hair_is_not_converged(tmp_path) -> None:
    # min_delta 1 keeps patience from firing (20.5 and 20.8 are not counted), but epoch 4 is still the best:
    # the schedule ended while the score was rising, so the run is not converged
    _, result, _, _ = _run([10.0, 20.0, 20.5, 20.8], tmp_path / "run", epochs=4, patience=3, min_delta=1.0)
    assert result.stopped == "max_epochs" and result.best_epoch == 4 and not result.converged
    # the same scores with the last epoch below the best: converged at the end of the schedule
    _, flat, _, _ = _run([10.0, 20.0, 20.8, 20.5], tmp_path / "run2", epochs=4, patience=3, min_delta=1.0)
    assert flat.stopped == "max_epochs" and flat.best_epoch == 3 and flat.converged


# ------------------------------------------------------------- extension epochs (TrainConfig.extend_epochs)


def test_extension_goes_on_at_the_last_lr_until_an_epoch_is_no_better(tmp_path) -> None:
    # 4 epochs rising, then extension epochs 5 (best), 6 (no better): stops after 6, best 5, converged
    lrs: list[float] = []
    validate, calls = _scripted([1.0, 2.0, 3.0, 4.0, 5.0, 4.5, 9.0, 9.0])
    cfg = _stopping_cfg(epochs=4, patience=0, extend_epochs=4)
    result = fit(_model(), TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB, validate=validate,
                 on_epoch_end=lambda e, row: lrs.append(row["lr"]))
    assert len(result.history) == 6 and len(calls) == 6
    assert result.best_epoch == 5 and result.stopped == "extension" and result.converged
    assert lrs[4] == lrs[5] == pytest.approx(lrs[3]) and lrs[3] == pytest.approx(cfg.lr * lr_factor(3, cfg))
    # out of extension epochs while still rising: not converged
    _, rising, _, _ = _run([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], tmp_path / "rising", epochs=4, patience=0, extend_epochs=2)
    assert len(rising.history) == 6 and rising.best_epoch == 6 and rising.stopped == "max_epochs"
    assert not rising.converged
    # a schedule whose last epoch is not its best runs no extension epoch
    _, flat, flat_calls, _ = _run([1.0, 3.0, 2.0, 2.5, 9.0], tmp_path / "flat", epochs=4, patience=0, extend_epochs=3)
    assert len(flat_calls) == 4 and flat.stopped == "max_epochs" and flat.best_epoch == 2 and flat.converged


def test_an_extended_run_continues_the_cached_run_without_extension(tmp_path, monkeypatch) -> None:
    """The extension starts from the cached schedule's last checkpoint and ends where an extended run trained
    from scratch ends (weights and history); without an extension the key is the one runs had before the field."""
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    cfg = TrainConfig(epochs=2, batch_size=8, progress=False, device="cpu")
    extended = TrainConfig(**{**cfg.__dict__, "extend_epochs": 2})
    assert run_key(_model(), TRAIN, VAL, extended) != run_key(_model(), TRAIN, VAL, cfg)
    rising = [1.0, 2.0, 3.0, 2.0]  # scripted: the schedule ends on its best, extension epoch 3 best, 4 no better
    base = fit(_model(), TRAIN, VAL, cfg, vocab=VOCAB, validate=_scripted(rising)[0])
    assert base.best_epoch == 2 and not base.converged
    epochs_run: list[int] = []
    validate, calls = _scripted(rising[2:])
    continued_model = _model()
    continued = fit(continued_model, TRAIN, VAL, extended, vocab=VOCAB, validate=validate,
                    on_epoch_end=lambda e, row: epochs_run.append(e))
    assert epochs_run == [2, 3] and len(calls) == 2 and not continued.cached and continued.run_dir != base.run_dir
    assert continued.best_epoch == 3 and continued.stopped == "extension" and continued.converged
    scratch_model = _model()
    scratch = fit(scratch_model, TRAIN, VAL, extended, tmp_path / "scratch", vocab=VOCAB, validate=_scripted(rising)[0])
    assert _same_history(continued.history, scratch.history)
    assert all(torch.equal(a, b) for a, b in zip(continued_model.state_dict().values(),
                                                 scratch_model.state_dict().values()))
    # a cached run that ended short of its best-last schedule is its own extended run: adopted, nothing trained
    converged_cfg = TrainConfig(**{**cfg.__dict__, "seed": 1})
    fit(_model(), TRAIN, VAL, converged_cfg, vocab=VOCAB, validate=_scripted([2.0, 1.0])[0])
    adopted = fit(_model(), TRAIN, VAL, TrainConfig(**{**converged_cfg.__dict__, "extend_epochs": 2}), vocab=VOCAB,
                  validate=_scripted([])[0])
    assert adopted.cached and adopted.best_epoch == 1 and len(adopted.history) == 2 and adopted.converged


def test_fits_validation_with_loaders_built_once_gives_evaluate_models_numbers_bit_for_bit() -> None:
    """`fit`'s validator builds the validation loaders once a run; every epoch's numbers are `evaluate_model`'s with
    fresh loaders, bit for bit, after the weights changed too."""
    from xmr_core.evaluate import evaluate_model
    from xmr_core.runs.train import _validator

    model = _model()
    validate = _validator(model, VAL, VOCAB, CFG, torch.device("cpu"))
    for _ in range(2):
        fresh = evaluate_model(model, VAL, VOCAB, batch_size=CFG.eval_batch_size, device="cpu",
                               views=list(CFG.val_views))
        assert validate(model, VAL) == fresh
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
