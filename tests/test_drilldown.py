"""Drill-down's supervised model (xmr_core.methods.drilldown): the states against GRU cells run step by step here in
float64 from the module's own weights (the GRU equations written out, the round-robin slots by hand), the similarity
against a loop over images, sets, states and regions, round 1 against the single query, padding and absent queries,
the query limit, the loss against a loop over the pairs, and gradients."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from fixtures.corpora import synthetic_split
from fixtures.recurrent import gru_step, gru_weights, query_sets_batch

from xmr_core.data.datasets import caption_loader, image_loader, query_loader
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, TextEncoderConfig
from xmr_core.evaluate import multi_query_scores
from xmr_core.methods.drilldown import DrillDownConfig
from xmr_core.methods.registry import create_method

D, HIDDEN, LAM = 8, 6, 9.0  # HIDDEN != D: the word states pass through W_f
ENCODERS = {"embed_dim": D, "image": ImageEncoderConfig(kind="regions", region_dim=4),
            "text": TextEncoderConfig(hidden=HIDDEN)}
TRAIN = synthetic_split("train", 8, np.random.default_rng(0))  # image i holds 1 + i % 3 queries
VAL = synthetic_split("val", 6, np.random.default_rng(1))
VOCAB = Vocabulary.build([q for qs in TRAIN.queries + VAL.queries for q in qs] + TRAIN.captions)
VECTORS = np.random.default_rng(2).standard_normal((len(VOCAB), 5)).astype(np.float32)
FIVE = ["object 0 of image 2", "object 1 of image 2 and more words", "object 2 of image 1", "object 3",
        "object 4 of image 0 and"]  # five rounds: every slot written, slots 0 and 1 twice


def _batch(*sets: list[str], width: int = 0) -> dict[str, torch.Tensor]:
    return query_sets_batch(VOCAB, *sets, width=width)


def _model(**overrides: object):
    torch.manual_seed(0)
    return create_method("drill-down", VECTORS, **ENCODERS, **overrides).eval()


def _query_by_hand(model, text: str) -> np.ndarray:
    """u_j (D,): the word GRU over the query's words (its own table), the last state through W_f."""
    words = model.word_encoder.embed.weight.detach().double().numpy()[VOCAB.encode(text)]
    h = np.zeros(HIDDEN)
    for x in words:
        h = gru_step(*gru_weights(model.word_encoder.rnn, "_l0"), x, h)
    return h @ model.word_fc.weight.detach().double().numpy().T + model.word_fc.bias.detach().double().numpy()


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- brute-force references
def test_the_states_are_written_in_turn_by_a_gru_cell():
    model = _model()
    # the set among a shorter one and a longer padded one: other sets' padding and queries must not matter
    batch = _batch(["object 2 of image 5"], FIVE, ["object 0 of image 1"] * 6)
    with torch.no_grad():
        s, written = (e[1].double().numpy() for e in model.encode_queries(batch))  # (6, 3, D), (6, 3)
    cell = gru_weights(model.cell)
    h = [np.zeros(D)] * 3
    expected, marks = [], []
    for j, query in enumerate(FIVE):  # round j + 1 writes slot j mod 3: 0, 1, 2, 0, 1
        h = list(h)
        h[j % 3] = gru_step(*cell, _query_by_hand(model, query), h[j % 3])
        expected.append([_unit(x) if j >= m else np.zeros(D) for m, x in enumerate(h)])
        marks.append([m <= j for m in range(3)])
    expected.append(expected[-1])  # round 6 is past the set: held
    marks.append(marks[-1])
    np.testing.assert_allclose(s, np.array(expected), atol=1e-5)
    np.testing.assert_array_equal(written, np.array(marks))


def test_the_similarity_is_the_mean_over_written_states_of_the_attended_region_dot_products():
    model = _model()
    with torch.no_grad():
        img = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
        sets = model.encode_queries(next(iter(query_loader(VAL, VOCAB, 6, visual=None))))
    scores = multi_query_scores(model, VAL, VOCAB, 3, short="hold", chunk_size=4, query_chunk=4)  # (3, Q, G)
    v, region_mask = (e.double().numpy() for e in img)
    s, written = (e.double().numpy() for e in sets)
    for r in range(3):
        for q in range(VAL.n_images):
            for i in range(VAL.n_images):
                sims = []
                for m in range(3):
                    if not written[q, min(r, s.shape[1] - 1), m]:
                        continue
                    a = np.array([v[i, k] @ s[q, min(r, s.shape[1] - 1), m]
                                  for k in range(v.shape[1]) if region_mask[i, k]])
                    w = np.exp(LAM * a) / np.exp(LAM * a).sum()
                    sims.append((w * a).sum())
                assert scores[r, q, i].item() == pytest.approx(np.mean(sims), abs=1e-5)
    assert scores.abs().max() <= 1.0 + 1e-6


def test_round_one_of_a_set_is_the_single_query():
    model = _model()
    with torch.no_grad():
        img = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
        sets = model.encode_queries(next(iter(query_loader(VAL, VOCAB, 6, visual=None, max_queries=1))))
        first = [qs[0] for qs in VAL.queries]
        single = dataclasses.replace(VAL, captions=first, caption_ids=[f"q{i}" for i in range(VAL.n_images)],
                                     caption_image=np.arange(VAL.n_images), caption_level=None, exact=None)
        caps = model.encode_captions(next(iter(caption_loader(single, VOCAB, 6))))
    for got, want in zip(sets, caps):
        torch.testing.assert_close(got, want)
    assert caps[1][:, 0].int().tolist() == [[1, 0, 0]] * VAL.n_images  # one state written
    torch.testing.assert_close(multi_query_scores(model, VAL, VOCAB, 1)[0], model.score(img, caps).T)


def test_padding_and_absent_queries_change_nothing():
    model = _model()
    with torch.no_grad():
        s, written = model.encode_queries(_batch(FIVE[:2]))
        s_pad, written_pad = model.encode_queries(
            _batch(FIVE[:2], ["object 1 of image 3 with many more words here"], width=5))
        v, mask = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
        # an image with padded regions scores as the same image cut to its real regions
        n_real = int(mask[0].sum())
        padded = model.score((v[:1], mask[:1]), (s, written))
        cut = model.score((v[:1, :n_real], mask[:1, :n_real]), (s, written))
    torch.testing.assert_close(s_pad[0, :2], s[0])
    torch.testing.assert_close(s_pad[0, 2:], s[0, 1:].expand(3, -1, -1))  # rounds past the set hold its states
    assert written_pad[0, 2:].int().tolist() == [[1, 1, 0]] * 3
    torch.testing.assert_close(padded, cut)


# ----------------------------------------------------------------------------- no query dropped
def test_a_set_longer_than_max_queries_or_with_a_gap_is_an_error_naming_its_image():
    model = _model(max_queries=2)
    batch = next(iter(query_loader(VAL, VOCAB, 6, visual=None)))  # image 2 has 3 queries
    with pytest.raises(ValueError, match="drill-down: image 2 has a set of 3 queries"):
        model.encode_queries(batch)
    with pytest.raises(ValueError, match="3 rounds: drill-down scores sets of at most max_queries=2"):
        multi_query_scores(model, VAL, VOCAB, 3)
    gap = _batch(FIVE[:3])
    gap["query_mask"][0, 1] = False
    with pytest.raises(ValueError, match=r"image 0 has a set of 2 queries \(mask \[1, 0, 1\]\)"):
        _model().encode_queries(gap)


def test_the_config_is_checked():
    with pytest.raises(TypeError, match="TextEncoderConfig"):
        DrillDownConfig(text=BertEncoderConfig())
    with pytest.raises(ValueError, match="n_states"):
        DrillDownConfig(n_states=0)


# ----------------------------------------------------------------------------- training
def test_loss_is_the_summed_hinge_averaged_over_the_rounds():
    model = _model(margin=0.3)
    with torch.no_grad():
        batch = _batch(FIVE[:3], FIVE[3:], FIVE[1:2])
        batch["image_index"] = torch.tensor([4, 4, 7])  # items 0 and 1 share an image: not each other's negatives
        img = model.encode_images(next(iter(image_loader(VAL, 3, visual="regions"))))
        sets = model.encode_queries(batch)
        loss, logs = model.loss(img, sets, batch)
    per_round = []
    for r in range(3):
        s = model.score(img, (sets[0][:, : r + 1], sets[1][:, : r + 1])).double().numpy()  # `score`: tested above
        total = 0.0
        for i in range(3):
            for j in range(3):
                if batch["image_index"][i] != batch["image_index"][j]:
                    total += max(0.0, 0.3 - s[i, i] + s[i, j]) + max(0.0, 0.3 - s[j, j] + s[i, j])
        per_round.append(total)
    assert loss.item() == pytest.approx(np.mean(per_round), rel=1e-5)
    assert logs["hinge_last_round"] == pytest.approx(per_round[-1], rel=1e-5)


def test_gradients_reach_every_parameter():
    model = _model().train()
    batch = next(iter(query_loader(TRAIN, VOCAB, 8, train=True, visual="regions")))
    # sets of up to 5 queries: the recurrent weights of the cell act only when a slot is written again (round > M)
    batch |= {k: v for k, v in _batch(*(FIVE[: 1 + b % 5] for b in range(8))).items() if k != "image_index"}
    loss, _ = model.loss(*model(batch), batch)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert missing == []
    assert model.task == "multi_query" and model.max_queries == 10
