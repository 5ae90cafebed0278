"""xmr_core.evaluate: split -> embeddings -> scores -> every metric under every view, tidy results."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr_core import evaluate as E
from xmr_core import metrics as M
from xmr_core.data.corpus import Split


def make_split(n_img: int = 10, per: int = 5, seed: int = 0, levels: bool = True) -> Split:
    rng = np.random.default_rng(seed)
    m = n_img * per
    cap_img = np.repeat(np.arange(n_img), per)
    exact = rng.random((m, n_img)) < 0.2
    exact[np.arange(m), cap_img] = True
    return Split(
        name="test",
        source="fake/scenes",
        image_ids=[f"i{i}" for i in range(n_img)],
        caption_ids=[f"c{j}" for j in range(m)],
        captions=["a red circle"] * m,
        caption_image=cap_img,
        image_class=np.arange(n_img) % 3,
        image_labels=(rng.random((n_img, 6)) < 0.3).astype(np.uint8),
        exact=exact,
        caption_level=[("full", "vague")[j % 2] for j in range(m)] if levels else None,
    ).validate()


def test_every_view_and_direction_matches_the_metrics_module():
    split = make_split()
    scores = torch.randn(split.n_images, split.n_captions, generator=torch.Generator().manual_seed(1))
    got = E.evaluate_scores(split, scores)
    for view in ("instance", "class", "exact"):
        for direction, s in (("i2t", scores), ("t2i", scores.T)):
            want = M.retrieval_metrics(s, split.relevance(view, direction))
            for k, v in want.items():
                assert got[f"{view}/{direction}/{k}"] == pytest.approx(v), (view, direction, k)
    # plausible: Split.relevance's own L1 matrix at each ζ (an independent construction of the relevance)
    for direction, s in (("i2t", scores), ("t2i", scores.T)):
        rps = []
        for z in (0, 1, 2):
            want = M.retrieval_metrics(s, split.relevance("plausible", direction, zeta=z))
            assert got[f"plausible/{direction}/mAP@R_zeta{z}"] == pytest.approx(want["mAP@R"])
            rps.append(want["R-P"])
        assert got[f"plausible/{direction}/PMRP"] == pytest.approx(np.mean(rps))
    assert got["rsum"] == pytest.approx(
        sum(got[f"instance/{d}/R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    )


def test_perfect_scores_hand_worked():
    # score 1 for a caption's own image, 0 elsewhere: every caption ranks its image first and every image
    # ranks its captions first (no negative ties with a positive at the top) -> R@1 = 100, rSum = 600.
    split = make_split(n_img=4, per=2, levels=False)
    scores = torch.from_numpy(split.relevance("instance", "i2t").astype(np.float32))
    got = E.evaluate_scores(split, scores, views=["instance"])
    assert got["instance/i2t/R@1"] == 100.0 and got["instance/t2i/R@1"] == 100.0
    assert got["instance/i2t/R-P"] == 100.0 and got["rsum"] == 600.0
    assert got["instance/t2i/medR"] == 1.0 and got["instance/t2i/meanR"] == 1.0


def test_caption_level_breakdown_is_the_subset_of_queries():
    split = make_split()
    scores = torch.randn(split.n_images, split.n_captions, generator=torch.Generator().manual_seed(2))
    got = E.evaluate_scores(split, scores, views=["instance", "exact"])
    levels = np.array(split.caption_level)
    for level in ("full", "vague"):
        rows = np.flatnonzero(levels == level)
        for view in ("instance", "exact"):
            want = M.retrieval_metrics(scores.T[rows], split.relevance(view, "t2i")[rows])
            for k, v in want.items():
                assert got[f"{view}/t2i@{level}/{k}"] == pytest.approx(v), (view, level, k)


def test_coco1k_protocol_averages_folds():
    split = make_split(n_img=10, per=5, levels=False)
    scores = torch.randn(10, 50, generator=torch.Generator().manual_seed(3))
    got = E.evaluate_scores(split, scores, views=["instance", "class"], protocol="coco1k")
    want = M.coco_1k(scores, split.relevance("instance", "i2t"))
    for k, v in want.items():
        key = "rsum" if k == "rsum" else f"instance/{k}"
        assert got[key] == pytest.approx(v), k
    cls = split.relevance("class", "i2t")
    folds = [M.retrieval_metrics(scores[i, c].T, cls[i, c].T)["R-P"] for i, c in M.coco_folds(10, 50)]
    assert got["class/t2i/R-P"] == pytest.approx(np.mean(folds))


def test_evaluate_scores_errors():
    split = make_split(levels=False)
    with pytest.raises(ValueError, match=r"fake/scenes: split 'test': scores have shape \(50, 10\)"):
        E.evaluate_scores(split, torch.zeros(50, 10))
    with pytest.raises(ValueError, match="unknown protocol"):
        E.evaluate_scores(split, torch.zeros(10, 50), protocol="coco2k")
    with pytest.raises(ValueError, match="COCO 5K needs 5000 images"):
        E.evaluate_scores(split, torch.zeros(10, 50), protocol="coco5k")
    no_exact = make_split(levels=False)
    no_exact.exact = None
    with pytest.raises(ValueError, match=r"has no \['exact'\] relevance"):
        E.evaluate_scores(no_exact, torch.zeros(10, 50), views=["instance", "exact"])
    bad = torch.zeros(10, 50)
    bad[4, 7] = float("nan")
    with pytest.raises(ValueError, match="fake/scenes: split 'test': scores: query row 4 contains a NaN"):
        E.evaluate_scores(split, bad)


def test_results_frame_is_tidy():
    split = make_split()
    got = E.evaluate_scores(split, torch.randn(10, 50), views=["instance", "plausible"])
    frame = E.results_frame(got)
    assert list(frame.columns) == ["view", "direction", "level", "metric", "value"]
    assert len(frame) == len(got)
    rsum = frame[frame.metric == "rsum"]
    assert rsum[["view", "direction", "level"]].values.tolist() == [["instance", "both", "all"]]
    assert rsum.value.item() == got["rsum"]
    vague = frame[(frame.level == "vague") & (frame.metric == "R@1")]
    assert vague.value.item() == got["instance/t2i@vague/R@1"]
    assert set(frame.view) == {"instance", "plausible"}
    with pytest.raises(ValueError, match="not view/direction/metric"):
        E.results_frame({"R@1": 3.0})


# ----------------------------------------------------------------------------- model -> embeddings


class FakeModel(torch.nn.Module):
    """Image i -> one-hot(i) as a Gaussian (mu, logvar); caption j -> one-hot of a stated image; dot scores."""

    def __init__(self, n_img: int) -> None:
        super().__init__()
        self.n_img = n_img
        self.w = torch.nn.Parameter(torch.zeros(1))

    def encode_images(self, batch):
        mu = torch.nn.functional.one_hot(batch["image_index"], self.n_img).float()
        return mu, torch.zeros_like(mu)

    def encode_captions(self, batch):
        mu = torch.nn.functional.one_hot(batch["tokens"][:, 0], self.n_img).float()
        return mu, torch.zeros_like(mu)

    def score(self, img, cap):
        return img[0] @ cap[0].T


def fake_loaders(split: Split, batch_size: int, caption_targets: np.ndarray):
    n, m = split.n_images, split.n_captions
    images = [
        {"images": torch.zeros(len(r), 3, 4, 4), "image_index": torch.tensor(r)}
        for r in np.array_split(np.arange(n), -(-n // batch_size))
    ]
    captions = [
        {
            "tokens": torch.as_tensor(caption_targets[r])[:, None],
            "lengths": torch.ones(len(r), dtype=torch.long),
            "caption_index": torch.tensor(r),
        }
        for r in np.array_split(np.arange(m), -(-m // batch_size))
    ]
    return images, captions


def test_embed_split_keeps_order_tuples_and_mode():
    split = make_split(n_img=6, per=2, levels=False)
    model = FakeModel(6).train()
    img, cap = E.embed_split(model, split, loaders=fake_loaders(split, 4, split.caption_image))
    assert isinstance(img, tuple) and img[0].shape == (6, 6) and cap[0].shape == (12, 6)
    assert torch.equal(img[0].argmax(1), torch.arange(6))
    assert model.training  # eval mode during embedding, training mode restored


def test_embed_split_refuses_dropped_or_shuffled_batches():
    split = make_split(n_img=6, per=2, levels=False)
    images, captions = fake_loaders(split, 4, split.caption_image)  # array_split: 2 batches of 3 images
    with pytest.raises(ValueError, match="images loader yielded 3 items"):
        E.embed_split(FakeModel(6), split, loaders=(images[:1], captions))
    with pytest.raises(ValueError, match="captions loader yielded 12 items"):
        E.embed_split(FakeModel(6), split, loaders=(images, captions[::-1]))
    with pytest.raises(ValueError, match="needs the vocabulary"):
        E.embed_split(FakeModel(6), split)


def test_score_matrix_in_chunks_equals_one_call():
    model = FakeModel(5)
    img = (torch.randn(7, 5), torch.zeros(7, 5))
    cap = (torch.randn(9, 5), torch.zeros(9, 5))
    assert torch.allclose(E.score_matrix(model, img, cap, chunk_size=3), img[0] @ cap[0].T)


def test_evaluate_model_end_to_end():
    # captions point at their own image, except caption 0 (of image 0) which points at image 1.
    # i2t: image 0 still has caption 1 at score 1 (rank 1). Image 1 scores 1 for c0, c2, c3; c0 is a
    #   negative tied with its positives -> pessimistic best rank 2. Others rank 1: R@1 = 5/6, meanR = 7/6.
    # t2i: caption 0 scores 1 for image 1 and 0 for images 0, 2..5; its image 0 ties with 4 negatives
    #   below image 1 -> rank 6. The 11 other captions rank 1: R@1 = 11/12, meanR = 17/12.
    split = make_split(n_img=6, per=2, levels=False)
    targets = split.caption_image.copy()
    targets[0] = 1
    got = E.evaluate_model(FakeModel(6), split, views=["instance"], loaders=fake_loaders(split, 5, targets))
    assert got["instance/i2t/R@1"] == pytest.approx(100 * 5 / 6)
    assert got["instance/i2t/meanR"] == pytest.approx(7 / 6)
    assert got["instance/t2i/R@1"] == pytest.approx(100 * 11 / 12)
    assert got["instance/t2i/meanR"] == pytest.approx((11 * 1 + 6) / 12)


class PixelModel(torch.nn.Module):
    """Image -> its mean red value; caption -> the index of its first word; score = -|difference|."""

    def encode_images(self, batch):
        return batch["images"][:, 0].mean((1, 2))[:, None]

    def encode_captions(self, batch):
        return batch["tokens"][:, :1].float()

    def score(self, img, cap):
        return -(img - cap.T).abs()


def test_evaluate_model_with_the_real_loaders():
    # Through `xmr_core.data.datasets`: the loaders batch in split order (a batch size that does not divide
    # the split), and the model's outputs line up with the split's images and captions.
    from xmr_core.data.text import Vocabulary

    split = make_split(n_img=5, per=2, levels=False)
    split.images = np.zeros((5, 8, 8, 3), dtype=np.uint8)
    split.validate()
    vocab = Vocabulary.build(split.captions)
    img, cap = E.embed_split(PixelModel(), split, vocab, batch_size=3)
    assert img.shape == (5, 1) and cap.shape == (10, 1)
    assert torch.equal(cap[:, 0], torch.full((10,), float(vocab.encode("a red circle")[0])))
    # every score is equal: pessimistic ties put each positive after all negatives
    # i2t: 10 captions, 2 positives -> best rank 9; t2i: 5 images, 1 positive -> rank 5
    got = E.evaluate_model(PixelModel(), split, vocab, batch_size=3, views=["instance"])
    assert got["instance/i2t/meanR"] == 9.0 and got["instance/t2i/meanR"] == 5.0


class MethodModel(FakeModel):
    """FakeModel whose score takes a similarity: "dot" (the default) or "negated"."""

    def score(self, img, cap, method=None):
        s = img[0] @ cap[0].T
        return -s if method == "negated" else s


def test_score_matrix_passes_score_kwargs():
    model = MethodModel(4)
    img, cap = (torch.eye(4), torch.zeros(4, 4)), (torch.eye(4)[[0, 1, 1]], torch.zeros(3, 4))
    assert torch.equal(E.score_matrix(model, img, cap, chunk_size=3, method="negated"), -(img[0] @ cap[0].T))


def test_evaluate_similarities_one_embedding_each_method():
    # every caption points at its own image: "dot" ranks every positive first (R@1 = 100); "negated" scores
    # a caption's own image -1 and the 5 others 0, so the image ranks last: t2i best rank 6, R@1 = 0.
    split = make_split(n_img=6, per=2, levels=False)
    model = MethodModel(6)
    got = E.evaluate_similarities(model, split, None, ["dot", "negated"], views=["instance"],
                                  loaders=fake_loaders(split, 4, split.caption_image))
    assert set(got) == {"dot", "negated"}
    assert got["dot"]["instance/t2i/R@1"] == 100.0 and got["dot"]["instance/i2t/R@1"] == 100.0
    assert got["negated"]["instance/t2i/R@1"] == 0.0 and got["negated"]["instance/t2i/meanR"] == 6.0


def test_each_direction_is_ranked_by_its_own_scores():
    split = make_split()
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(10, 50, generator=gen), torch.randn(10, 50, generator=gen)
    both = E.evaluate_scores(split, a, scores_t2i=b)
    only_a, only_b = E.evaluate_scores(split, a), E.evaluate_scores(split, b)
    assert {k: v for k, v in both.items() if "/i2t" in k} == {k: v for k, v in only_a.items() if "/i2t" in k}
    assert {k: v for k, v in both.items() if "/t2i" in k} == {k: v for k, v in only_b.items() if "/t2i" in k}
    with pytest.raises(ValueError, match="scores_t2i have shape"):
        E.evaluate_scores(split, a, scores_t2i=b.T)


class DirectionalModel(FakeModel):
    """Scores x.y for image queries and 2 x.y - |x|^2 (a query-dependent offset) for caption queries."""

    directional = True

    def score_direction(self, img, cap, direction):
        s = img[0] @ cap[0].T
        return s if direction == "i2t" else 2 * s - (img[0] ** 2).sum(1, keepdim=True)


def test_direction_scores_per_direction_chunked_and_reranked():
    gen = torch.Generator().manual_seed(4)
    img = (torch.randn(7, 3, generator=gen), torch.zeros(7, 3))
    cap = (torch.randn(9, 3, generator=gen), torch.zeros(9, 3))
    dot = img[0] @ cap[0].T
    i2t, t2i = E.direction_scores(DirectionalModel(3), img, cap)
    torch.testing.assert_close(i2t, dot)
    torch.testing.assert_close(t2i, 2 * dot - (img[0] ** 2).sum(1, keepdim=True))
    blocks = E.score_matrix(DirectionalModel(3), img, cap, direction="t2i", chunk_size=2, caption_chunk=4)
    torch.testing.assert_close(blocks, t2i)
    # a re-ranker sees (queries, gallery): image rows for i2t, caption rows (the transpose) for t2i
    seen = []

    def rerank(s, direction):
        seen.append((direction, *s.shape))
        return s - s.mean(dim=1, keepdim=True)

    r_i2t, r_t2i = E.direction_scores(DirectionalModel(3), img, cap, rerank=rerank)
    assert seen == [("i2t", 7, 9), ("t2i", 9, 7)]
    torch.testing.assert_close(r_i2t, dot - dot.mean(1, keepdim=True))
    torch.testing.assert_close(r_t2i, t2i - t2i.mean(0, keepdim=True))
    # a model that is not directional is scored once, the same in both directions
    same_i2t, same_t2i = E.direction_scores(FakeModel(3), img, cap)
    assert same_t2i is same_i2t
