"""R-RE and R-HRE (xmr_core.methods.recurrent_sets): each set's vector against GRUs run step by step here in float64
from the modules' own weights (the GRU equations written out), round 1 against the single query, the score as a
cosine, padding, the query limit, the loss against a loop over the pairs, and gradients."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from fixtures.corpora import synthetic_split
from fixtures.recurrent import gru_by_hand, query_sets_batch

from xmr_core.data.datasets import caption_loader, image_loader, query_loader
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, TextEncoderConfig
from xmr_core.evaluate import multi_query_scores
from xmr_core.methods.recurrent_sets import RecurrentSetConfig
from xmr_core.methods.registry import create_method

D, HIDDEN = 8, 6  # HIDDEN != D: the word states pass through W_f
ENCODERS = {"embed_dim": D, "image": ImageEncoderConfig(kind="regions", region_dim=4),
            "text": TextEncoderConfig(hidden=HIDDEN)}
METHODS = ("r-re", "r-hre")
TRAIN = synthetic_split("train", 8, np.random.default_rng(0))  # image i holds 1 + i % 3 queries
VAL = synthetic_split("val", 6, np.random.default_rng(1))
VOCAB = Vocabulary.build([q for qs in TRAIN.queries + VAL.queries for q in qs] + TRAIN.captions)
VECTORS = np.random.default_rng(2).standard_normal((len(VOCAB), 5)).astype(np.float32)


def _batch(*sets: list[str], width: int = 0) -> dict[str, torch.Tensor]:
    return query_sets_batch(VOCAB, *sets, width=width)


def _model(name: str, **overrides: object):
    torch.manual_seed(0)
    return create_method(name, VECTORS, **ENCODERS, **overrides).eval()


def _words(model, text: str) -> np.ndarray:
    """The word vectors (M, d) of a query, from the model's own (fine-tuned) table."""
    return model.word_encoder.embed.weight.detach().double().numpy()[VOCAB.encode(text)]


def _fc(model, h: np.ndarray) -> np.ndarray:
    return h @ model.word_fc.weight.detach().double().numpy().T + model.word_fc.bias.detach().double().numpy()


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- brute-force references
TWO = ["object 0 of image 2", "object 1 of image 2 and more words"]  # 4 and 8 words


def test_r_re_is_one_gru_over_the_concatenated_words():
    model = _model("r-re")
    # the set among a longer set and a shorter one: other sets' padding and queries must not matter
    batch = _batch(["object 2 of image 5"], TWO, ["object 0 of image 1"] * 3)
    with torch.no_grad():
        got = model.encode_queries(batch)[1].double().numpy()  # (3, D): rounds 1, 2 and the held round 3
    first, second = _words(model, TWO[0]), _words(model, TWO[1])
    states = gru_by_hand(model.word_encoder.rnn, np.concatenate([first, second]))  # q_1's words, then q_2's
    round1 = _unit(_fc(model, states[len(first) - 1]))
    round2 = _unit(_fc(model, states[-1]))
    np.testing.assert_allclose(got, np.stack([round1, round2, round2]), atol=1e-5)
    # the concatenation is not the sum of its parts: q_2 alone gives another vector
    assert not np.allclose(_unit(_fc(model, gru_by_hand(model.word_encoder.rnn, second)[-1])), round2, atol=1e-3)


def test_r_hre_runs_a_query_level_gru_over_each_query_s_last_state():
    model = _model("r-hre")
    batch = _batch(["object 2 of image 5"], TWO, ["object 0 of image 1"] * 3)
    with torch.no_grad():
        got = model.encode_queries(batch)[1].double().numpy()
    u = np.stack([_fc(model, gru_by_hand(model.word_encoder.rnn, _words(model, q))[-1]) for q in TWO])  # u_1, u_2
    c = gru_by_hand(model.context, u)  # c_1 = GRU_c(u_1, 0), c_2 = GRU_c(u_2, c_1)
    np.testing.assert_allclose(got, _unit(np.stack([c[0], c[1], c[1]])), atol=1e-5)


@pytest.mark.parametrize("name", METHODS)
def test_round_one_of_a_set_is_the_single_query(name):
    model = _model(name)
    with torch.no_grad():
        img = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
        sets = model.encode_queries(next(iter(query_loader(VAL, VOCAB, 6, visual=None, max_queries=1))))
        first = [qs[0] for qs in VAL.queries]
        single = dataclasses.replace(VAL, captions=first, caption_ids=[f"q{i}" for i in range(VAL.n_images)],
                                     caption_image=np.arange(VAL.n_images), caption_level=None, exact=None)
        caps = model.encode_captions(next(iter(caption_loader(single, VOCAB, 6))))
    torch.testing.assert_close(sets, caps)
    torch.testing.assert_close(multi_query_scores(model, VAL, VOCAB, 1)[0], model.score(img, caps).T)


@pytest.mark.parametrize("name", METHODS)
def test_the_score_is_the_cosine_of_the_image_and_the_set_so_far(name):
    model = _model(name)
    with torch.no_grad():
        img = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
        sets = model.encode_queries(next(iter(query_loader(VAL, VOCAB, 6, visual=None))))
    scores = multi_query_scores(model, VAL, VOCAB, 3, short="hold")  # (rounds, sets, images)
    v, f = img.double().numpy(), sets.double().numpy()
    for r in range(3):
        cos = np.array([[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a in v] for b in f[:, r]])
        np.testing.assert_allclose(scores[r].double().numpy(), cos, atol=1e-6)
    assert scores.abs().max() <= 1.0 + 1e-6


@pytest.mark.parametrize("name", METHODS)
def test_padding_never_changes_a_set_s_vector(name):
    model = _model(name)
    with torch.no_grad():
        alone = model.encode_queries(_batch(TWO))[0]  # (2, D)
        padded = model.encode_queries(_batch(TWO, ["object 1 of image 3 with many more words here"], width=5))[0]
    torch.testing.assert_close(padded[:2], alone)  # absent queries and longer padding: nothing changes
    torch.testing.assert_close(padded[2:], alone[1:].expand(3, -1))  # rounds past the set hold its whole set


# ----------------------------------------------------------------------------- no query dropped
@pytest.mark.parametrize("name", METHODS)
def test_a_set_longer_than_max_queries_or_with_a_gap_is_an_error_naming_its_image(name):
    model = _model(name, max_queries=2)
    batch = next(iter(query_loader(VAL, VOCAB, 6, visual=None)))  # image 2 has 3 queries
    with pytest.raises(ValueError, match=f"{name}: image 2 has a set of 3 queries"):
        model.encode_queries(batch)
    with pytest.raises(ValueError, match=f"3 rounds: {name} scores sets of at most max_queries=2"):
        multi_query_scores(model, VAL, VOCAB, 3)
    gap = _batch(TWO + ["object 2 of image 2"])
    gap["query_mask"][0, 1] = False
    with pytest.raises(ValueError, match=r"image 0 has a set of 2 queries \(mask \[1, 0, 1\]\)"):
        _model(name).encode_queries(gap)


def test_the_text_encoder_must_be_the_word_gru():
    with pytest.raises(TypeError, match="TextEncoderConfig"):
        RecurrentSetConfig(text=BertEncoderConfig())
    with pytest.raises(ValueError, match="margin >= 0"):
        RecurrentSetConfig(margin=-0.1)


# ----------------------------------------------------------------------------- training
@pytest.mark.parametrize("name", METHODS)
def test_loss_is_the_summed_hinge_averaged_over_the_rounds(name):
    model = _model(name, margin=0.3)
    rng = np.random.default_rng(3)
    img = torch.nn.functional.normalize(torch.tensor(rng.standard_normal((3, D))), dim=-1)
    sets = torch.nn.functional.normalize(torch.tensor(rng.standard_normal((3, 2, D))), dim=-1)
    batch = {"image_index": torch.tensor([4, 4, 7])}  # items 0 and 1 share an image: not each other's negatives
    loss, logs = model.loss(img, sets, batch)
    per_round = []
    for r in range(2):
        s = img.numpy() @ sets[:, r].numpy().T
        total = 0.0
        for i in range(3):
            for j in range(3):
                if batch["image_index"][i] != batch["image_index"][j]:
                    total += max(0.0, 0.3 - s[i, i] + s[i, j]) + max(0.0, 0.3 - s[j, j] + s[i, j])
        per_round.append(total)
    assert loss.item() == pytest.approx(np.mean(per_round), rel=1e-9)
    assert logs["hinge_last_round"] == pytest.approx(per_round[1], rel=1e-9)


@pytest.mark.parametrize("name", METHODS)
def test_gradients_reach_every_parameter(name):
    model = _model(name).train()
    batch = next(iter(query_loader(TRAIN, VOCAB, 8, train=True, visual="regions")))
    loss, _ = model.loss(*model(batch), batch)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert missing == []
    assert model.task == "multi_query" and model.max_queries == 10
