"""Datasets, collate, loaders (xmr_core/data/datasets.py) and samplers (xmr_core/data/samplers.py)."""

import numpy as np
import pytest
import torch

from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.data.datasets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Augmentation,
    ImageConfig,
    MultiQueryDataset,
    PairDataset,
    caption_loader,
    image_loader,
    pair_loader,
    query_loader,
    word_dropout,
)
from xmr_core.data.samplers import (
    AllCaptionsSampler,
    ClassBalancedBatchSampler,
    OneCaptionPerImageSampler,
    caption_classes,
)
from xmr_core.data.text import UNK_INDEX, Vocabulary

CAPTIONS = [
    "a red circle",  # 3 tokens
    "two shapes , one of them blue",  # 7 tokens
    "a blue square left of a red circle",  # 8 tokens
    "something green",  # 2 tokens
    "a green triangle",
    "three shapes",
    "a small square",
    "blue",  # 1 token
]
QUERIES = [["a red circle", "a blue square"], ["green triangle"], ["a small square", "red", "blue circle"]]


def make_split(n_regions_valid=(3, 2, 1)) -> Split:
    """3 images (8x6 pixels), captions 0-2 -> image 0, 3-5 -> image 1, 6-7 -> image 2."""
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(3, 3, 4)).astype(np.float32)
    for i, n in enumerate(n_regions_valid):
        regions[i, n:] = 0.0  # padding rows
    return Split(
        name="train",
        source="memory",
        image_ids=["i0", "i1", "i2"],
        caption_ids=[f"c{k}" for k in range(8)],
        captions=list(CAPTIONS),
        caption_image=np.array([0, 0, 0, 1, 1, 1, 2, 2]),
        images=rng.integers(0, 256, size=(3, 8, 6, 3), dtype=np.uint8),
        regions=regions,
        image_class=np.array([0, 1, 0]),
        queries=[list(q) for q in QUERIES],
    ).validate()


@pytest.fixture
def split() -> Split:
    return make_split()


@pytest.fixture
def vocab(split) -> Vocabulary:
    return Vocabulary.build(split.captions)


def test_pair_item_pixels_are_normalised(split, vocab):
    item = PairDataset(split, vocab, visual="pixels")[4]
    assert item["image_index"] == 1 and item["caption_index"] == 4
    x = item["images"]
    assert x.dtype == torch.float32 and x.shape == (3, 8, 6)
    expected = (split.images[1].astype(np.float64) / 255.0 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    np.testing.assert_allclose(x.numpy(), expected.transpose(2, 0, 1), rtol=1e-5, atol=1e-5)


def test_collate_pads_tokens_and_reports_lengths(split, vocab):
    batch = next(iter(caption_loader(split, vocab, batch_size=4)))
    assert batch["tokens"].dtype == torch.int64 and batch["lengths"].dtype == torch.int64
    assert batch["lengths"].tolist() == [3, 7, 8, 2]  # counted by hand in CAPTIONS
    assert batch["tokens"].shape == (4, 8)
    assert (batch["tokens"][0, 3:] == 0).all() and (batch["tokens"][0, :3] > 0).all()
    assert vocab.decode(batch["tokens"][2].tolist()) == [
        "a",
        "blue",
        "square",
        "left",
        "of",
        "a",
        "red",
        "circle",
    ]
    assert batch["caption_index"].tolist() == [0, 1, 2, 3]


def test_pair_loader_batch_contract(split, vocab):
    batches = list(pair_loader(split, vocab, batch_size=2, epoch="all_captions", visual="pixels"))
    assert [len(b["caption_index"]) for b in batches] == [2, 2, 2, 2]
    seen = torch.cat([b["caption_index"] for b in batches]).sort().values
    assert seen.tolist() == list(range(8))
    for b in batches:
        assert b["images"].shape == (2, 3, 8, 6) and b["images"].dtype == torch.float32
        assert (b["image_index"] == torch.from_numpy(split.caption_image)[b["caption_index"]]).all()
        assert b["tokens"].shape[1] == int(b["lengths"].max())


def test_pair_loader_is_reproducible_from_seed(split, vocab):
    def run(seed):
        return [
            b["caption_index"].tolist() for b in pair_loader(split, vocab, 2, epoch="all_captions", seed=seed)
        ]

    assert run(0) == run(0)
    assert any(run(0) != run(s) for s in (1, 2, 3))


def test_regions_and_mask(split, vocab):
    batch = next(iter(image_loader(split, batch_size=3, visual="regions")))
    assert batch["regions"].shape == (3, 3, 4) and batch["regions"].dtype == torch.float32
    assert batch["region_mask"].dtype == torch.bool
    assert batch["region_mask"].tolist() == [[True, True, True], [True, True, False], [True, False, False]]
    np.testing.assert_array_equal(batch["regions"].numpy(), split.regions)
    assert batch["image_index"].tolist() == [0, 1, 2]


def test_image_with_only_padding_regions_is_an_error(vocab):
    with pytest.raises(DataFormatError, match="'i1'"):
        list(image_loader(make_split((3, 0, 1)), 2, visual="regions"))


def test_auto_visual_prefers_pixels_and_missing_source_errors(split):
    assert "images" in next(iter(image_loader(split, 3)))
    no_regions = make_split()
    no_regions.regions = None
    with pytest.raises(ValueError, match="no region features"):
        image_loader(no_regions, 3, visual="regions")


@pytest.mark.parametrize("bad", ["", "   "])
def test_caption_without_tokens_names_its_id(split, vocab, bad):
    split.captions[5] = bad
    with pytest.raises(DataFormatError, match="'c5'"):
        caption_loader(split, vocab, 2)
    with pytest.raises(DataFormatError, match="'c5'"):
        PairDataset(split, vocab)


def test_image_files_are_loaded_and_missing_ones_named(split, tmp_path):
    from PIL import Image

    paths = []
    for i, img in enumerate(split.images):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(img).save(paths[-1])
    split.images = None
    split.image_paths = paths
    cfg = ImageConfig(resize=6, crop=6)
    batch = next(iter(image_loader(split, 3, image_config=cfg)))
    assert batch["images"].shape == (3, 3, 6, 6)
    # resize to shorter side 6 is a no-op for 8x6 images, centre crop keeps rows 1..6
    expected = (make_split().images[:, 1:7].astype(np.float64) / 255 - np.array(IMAGENET_MEAN)) / np.array(
        IMAGENET_STD
    )
    np.testing.assert_allclose(batch["images"].numpy(), expected.transpose(0, 3, 1, 2), atol=1e-5)
    split.image_paths[1] = str(tmp_path / "gone.png")
    with pytest.raises(FileNotFoundError, match="gone.png.*'i1'"):
        next(iter(image_loader(split, 3, image_config=cfg)))


def test_word_dropout_replaces_then_deletes():
    tokens = torch.arange(2, 12)  # 10 distinct non-special tokens
    assert torch.equal(word_dropout(tokens, 0.0), tokens)
    for _ in range(20):
        out = word_dropout(tokens, 0.3)
        assert len(out) == 7  # floor(10 * 0.3) = 3 tokens deleted
        kept = out[out != UNK_INDEX].tolist()
        assert kept == sorted(kept) and set(kept) <= set(tokens.tolist())  # order kept, nothing invented


def test_augmentations_only_in_training(split, vocab):
    aug = Augmentation(random_erasing_prob=1.0, word_dropout=0.5)
    evaluation = PairDataset(split, vocab, visual="pixels", train=False, augment=aug)[2]
    training = PairDataset(split, vocab, visual="pixels", train=True, augment=aug)[2]
    assert len(evaluation["tokens"]) == 8 and len(training["tokens"]) == 4  # floor(8 * 0.5) deleted
    erased = training["images"] == 0
    assert erased.any() and not (evaluation["images"] == 0).any()
    assert torch.equal(training["images"][~erased], evaluation["images"][~erased])
    with pytest.raises(ValueError, match="word_dropout"):
        Augmentation(word_dropout=1.0)


def test_multi_query_order_fixed_at_test_and_shuffled_in_training(split, vocab):
    batch = next(iter(query_loader(split, vocab, 3, visual="regions")))
    assert batch["query_tokens"].shape == (3, 3, 3)  # 3 images, at most 3 queries, longest query 3 tokens
    assert batch["query_mask"].tolist() == [[True, True, False], [True, False, False], [True, True, True]]
    assert batch["query_lengths"].tolist() == [[3, 3, 0], [2, 0, 0], [3, 1, 2]]
    decoded = [
        [" ".join(vocab.decode(q.tolist())) for q, m in zip(img, mask) if m]
        for img, mask in zip(batch["query_tokens"], batch["query_mask"])
    ]
    assert decoded == QUERIES
    train = MultiQueryDataset(split, vocab, visual="regions", train=True)
    orders = {tuple(" ".join(vocab.decode(q.tolist())) for q in train[2]["queries"]) for _ in range(40)}
    assert all(sorted(o) == sorted(QUERIES[2]) for o in orders)
    assert len(orders) > 1  # 6 possible orders; 40 draws give one order only with probability 6 * 6^-40
    split.queries[1] = []
    with pytest.raises(DataFormatError, match="'i1'"):
        MultiQueryDataset(split, vocab)


def test_multi_query_max_queries_takes_the_first_at_test_and_draws_every_query_in_training(split, vocab):
    first_two = MultiQueryDataset(split, vocab, visual=None, max_queries=2)[2]
    assert set(first_two) == {"queries", "image_index"}  # visual=None: no image is read
    assert [" ".join(vocab.decode(q.tolist())) for q in first_two["queries"]] == QUERIES[2][:2]
    train = MultiQueryDataset(split, vocab, visual="regions", train=True, max_queries=2)
    drawn = [tuple(" ".join(vocab.decode(q.tolist())) for q in train[2]["queries"]) for _ in range(60)]
    assert all(len(d) == 2 and len(set(d)) == 2 for d in drawn)  # 2 distinct queries of the 3 each time
    assert {q for d in drawn for q in d} == set(QUERIES[2])  # each of the 3 is drawn (P(miss) = 3 (1/3)^60)
    assert len(train[1]["queries"]) == 1  # a shorter set keeps what it has
    with pytest.raises(ValueError, match="max_queries must be >= 1"):
        MultiQueryDataset(split, vocab, max_queries=0)


def test_one_caption_per_image_sampler(split):
    sampler = OneCaptionPerImageSampler(split.caption_image, split.n_images, seed=5)
    chosen_all = set()
    epochs = [list(sampler) for _ in range(30)]
    for epoch in epochs:
        assert sorted(split.caption_image[epoch].tolist()) == [0, 1, 2]  # each image once
        chosen_all |= set(epoch)
    assert chosen_all == set(range(8))  # over 30 epochs every caption gets its turn
    assert len({tuple(e) for e in epochs}) > 1
    again = OneCaptionPerImageSampler(split.caption_image, split.n_images, seed=5)
    assert [list(again) for _ in range(30)] == epochs
    again.set_epoch(7)
    assert list(again) == epochs[7]
    with pytest.raises(ValueError, match=r"\[3\]"):
        OneCaptionPerImageSampler(split.caption_image, 4)


def test_all_captions_sampler_is_a_permutation():
    sampler = AllCaptionsSampler(11, seed=1)
    a, b = list(sampler), list(sampler)
    assert sorted(a) == sorted(b) == list(range(11)) and a != b and len(sampler) == 11


def test_class_balanced_batches(split):
    classes = caption_classes(split)
    assert classes.tolist() == [0, 0, 0, 1, 1, 1, 0, 0]  # image classes 0, 1, 0 repeated per caption
    with pytest.raises(ValueError, match="batch_size=4.*2 classes"):
        ClassBalancedBatchSampler(classes, batch_size=4)
    item_class = np.repeat([3, 7, 9], [5, 2, 3])  # 10 items, 3 classes
    sampler = ClassBalancedBatchSampler(item_class, batch_size=3, n_batches=10, seed=0)
    batches = list(sampler)
    assert len(batches) == 10 and len(ClassBalancedBatchSampler(item_class, 3)) == 3  # 10 // 3
    for batch in batches:
        assert sorted(item_class[batch].tolist()) == [3, 7, 9]
    # class 7 has 2 items: each pair of consecutive batches uses both before any repeats
    sevens = [next(j for j in b if item_class[j] == 7) for b in batches]
    assert all(sorted(sevens[k : k + 2]) == [5, 6] for k in range(0, 10, 2))
    with pytest.raises(ValueError, match="batch_size=5 but the batch sampler makes batches of 2"):
        pair_loader(
            split, Vocabulary.build(split.captions), 5, batch_sampler=ClassBalancedBatchSampler(classes, 2)
        )
    loader = pair_loader(
        split, Vocabulary.build(split.captions), 2, batch_sampler=ClassBalancedBatchSampler(classes, 2)
    )
    for b in loader:
        assert sorted(split.image_class[b["image_index"].numpy()].tolist()) == [0, 1]


