"""The paper profiles on real-layout data: paper-smoke's budget and code path, the views each data set has and what a
table or claim without its view says, the real-layout fixtures read through the real readers, and the plan's order.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.corpora import synthetic_split
from fixtures.real_layout import N_REGIONS, write_coco, write_cub, write_f30k, write_vg

from xmr_core.book.plan import LEADERBOARD_READS, with_upstream
from xmr_core.book.runner import resolve_chapters
from xmr_core.chapters.views import ceiling_caption, judge_viewed, missing_view, missing_views
from xmr_core.claims import ClaimSpec, Evidence
from xmr_core.config import RunConfig, budget, check_profile, recipe
from xmr_core.data.corpus import Split
from xmr_core.data.datasets import with_pixels
from xmr_core.data.load import load_corpus
from xmr_core.encoders.image import imagenet_weights_path
from xmr_core.evaluate import evaluate_scores
from xmr_core.experiment.protocols import chapter_trunk
from xmr_core.experiment.recipes import LOADER_WORKERS, encoder_configs, pcme_train_config


def test_paper_smoke_takes_smokes_budget_and_papers_code_path() -> None:
    assert [budget(p) for p in ("smoke", "cpu", "paper", "paper-smoke")] == ["smoke", "cpu", "paper", "smoke"]
    assert [recipe(p) for p in ("smoke", "cpu", "paper", "paper-smoke")] == ["smoke", "cpu", "paper", "paper"]
    with pytest.raises(ValueError, match="unknown profile 'papersmoke'"):
        budget("papersmoke")
    assert RunConfig(profile="paper-smoke").seeds(5) == [0] and RunConfig(profile="paper").seeds(5) == list(range(5))
    smoke, paper = pcme_train_config("paper-smoke"), pcme_train_config("smoke")
    assert (smoke.epochs, smoke.batch_size, smoke.lr) == (paper.epochs, paper.batch_size, paper.lr)
    assert check_profile("paper-smoke") == "paper-smoke"


@pytest.mark.skipif(imagenet_weights_path("resnet50").is_file(), reason="the ImageNet weights are installed here")
def test_only_paper_smoke_runs_the_trunk_without_imagenet_weights_and_says_so() -> None:
    with pytest.raises(FileNotFoundError, match=r"resnet50-0676ba61\.pth: no ImageNet weights for resnet50"):
        chapter_trunk("paper", corpus=None)  # type: ignore[arg-type]
    a, b = chapter_trunk("paper-smoke", corpus=None), chapter_trunk("paper-smoke", corpus=None)  # type: ignore[arg-type]
    assert a.meta["source"].startswith("no ImageNet weights") and a.meta["weights"] is None
    assert a.key == b.key == "resnet50-init0z"
    for p, q in zip(a.net.parameters(), b.net.parameters()):  # seeded: the same weights on any machine
        assert torch.equal(p, q)
    enc = encoder_configs("paper-smoke", a, finetune=True)
    assert enc["image"].pretrained is False and (enc["embed_dim"], enc["text"].hidden) == (64, 32)
    assert encoder_configs("paper-smoke", a)["image"].trunk == a.key


def test_a_missing_view_is_named_and_its_claim_not_tested_without_building_evidence() -> None:
    split = dataclasses.replace(synthetic_split("test", 5, np.random.default_rng(0)), image_class=None,
                                class_names=None, exact=None, name="test")
    assert missing_view(split, "plausible", "coco") == ""
    assert missing_view(split, "class", "coco") == "COCO has no class relevance on its test split (image classes: CUB's)"
    assert list(missing_views({"class": split, "plausible": split, "exact": split}, "coco")) == ["class", "exact"]
    assert ceiling_caption(split, "coco") == " (no ceiling: COCO's relevance is annotated, not exact.)"
    specs = [ClaimSpec("a", "A beats B.", "Table 1", "superiority", "class metric", ("A", "B")),
             ClaimSpec("b", "A beats B.", "Table 2", "superiority", "instance metric", ("A", "B"))]

    def never() -> dict[str, Evidence]:
        raise AssertionError("the evidence of a claim whose view is missing was built")

    evidence = {"A": Evidence((0, 1), np.array([5.0, 6.0])), "B": Evidence((0, 1), np.array([1.0, 2.0]))}
    judged = judge_viewed(specs, {"class metric": never, "instance metric": lambda: evidence},
                          {"class metric": "class"}, missing_views({"class": split}, "coco"),
                          RunConfig(profile="paper-smoke", dataset="coco"))
    assert next((j.verdict, j.reason) for j in judged) == ("not tested", missing_view(split, "class", "coco"))
    assert judged[1].verdict != "not tested"


def test_the_coco_1k_protocol_names_the_split_it_cannot_fold() -> None:
    split = synthetic_split("test", 7, np.random.default_rng(0))
    scores = torch.zeros(7, 35)
    with pytest.raises(ValueError, match=r"^synthetic:test: split 'test': the COCO 1K protocol: "
                                         r"7 images / 35 captions do not split into 5 equal folds$"):
        evaluate_scores(split, scores, views=["instance"], protocol="coco1k")


def test_coco_1k_folds_keep_each_images_captions_when_some_have_more() -> None:
    """Karpathy's COCO json gives a few images 6 or 7 captions: a fold holds its 1/5 of the images and exactly their
    captions (`image_folds`), which equal caption slices would cut across; with 5 each, the stored-order folds."""
    from xmr_core.metrics import coco_folds, image_folds

    uniform = np.repeat(np.arange(10), 5)
    assert image_folds(uniform, 10) == coco_folds(10, 50)
    counts = [5, 7, 5, 5, 6, 5, 5, 5, 5, 5]  # images 1 and 4 hold 7 and 6 captions: 53 captions
    caption_image = np.repeat(np.arange(10), counts)
    folds = image_folds(caption_image, 10)
    assert [(i.start, i.stop) for i, _ in folds] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert [(c.start, c.stop) for _, c in folds] == [(0, 12), (12, 22), (22, 33), (33, 43), (43, 53)]  # by hand
    for images, captions in folds:
        assert set(caption_image[captions]) == set(range(images.start, images.stop))
    with pytest.raises(ValueError, match="not grouped by image"):
        image_folds(caption_image[::-1], 10)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: write(tmp_path_factory.mktemp(name)) for name, write in
            (("cub", write_cub), ("coco", write_coco), ("f30k", write_f30k), ("vg", write_vg))}


@pytest.mark.parametrize(("dataset", "fmt", "views"), [
    ("cub", "cub", ["instance", "class"]), ("coco", "karpathy", ["instance", "plausible"]),
    ("coco", "precomp", ["instance"]), ("f30k", "precomp", ["instance"]), ("vg", "drilldown", ["instance"])])
def test_the_real_layout_fixtures_read_as_real_data_with_the_views_it_has(roots: dict[str, Path], dataset: str,
                                                                          fmt: str, views: list[str]) -> None:
    root = roots[dataset]
    assert not list(root.rglob("xmr_*")), "a real-layout fixture has no export sidecar or manifest"
    corpus = load_corpus(dataset, root, "paper", format=fmt, progress=False)
    for split in corpus.splits.values():
        assert split.views() == views and split.caption_level is None, (split.name, split.views())
        if fmt in ("precomp", "drilldown"):
            assert split.regions.shape[1] == N_REGIONS
    if dataset == "cub":  # the class split is zero-shot: the test classes are unseen in train and val
        seen = set(corpus["train"].image_class) | set(corpus["val"].image_class)
        assert not seen & set(corpus["test"].image_class)
        assert corpus["train"].n_captions == 10 * corpus["train"].n_images
        pixels = with_pixels(corpus["test"])  # the figures' pixels: the files decoded as evaluation reads them
        assert pixels.images.shape == (corpus["test"].n_images, 224, 224, 3) and pixels.images.dtype == np.uint8
    if dataset == "coco" and fmt == "karpathy":  # Karpathy's val and test images are val2014's, by their cocoid
        assert all(Path(p).name.startswith("COCO_val2014_") for p in corpus["test"].image_paths)
        assert corpus["test"].image_ids == load_corpus("coco", root, "paper", format="precomp",
                                                       progress=False)["test"].image_ids
    if dataset == "vg":  # Drill-down's split files list images with at least 10 distinct phrases
        assert min(len({q.lower() for q in qs}) for s in corpus.splits.values() for qs in s.queries) >= 10


def test_plan_runs_the_train_notebook_whose_tables_a_notebook_reads_before_it() -> None:
    labels = lambda notebooks: [nb.label for nb in notebooks]
    assert labels(with_upstream(resolve_chapters(["hrem/ablate"]))) == ["03_hrem/train", "03_hrem/ablate"]
    assert labels(with_upstream(resolve_chapters(["03_hrem"]))) == labels(resolve_chapters(["03_hrem"]))
    board = labels(with_upstream(resolve_chapters(["06_leaderboard"])))
    assert board[-1] == "06_leaderboard/leaderboard" and all(label.endswith("/train") for label in board[:-1])
    assert board[:-1] == ["01_pcme/train", "02_msrm/train", "04_dvse/train", "03_hrem/train"]
    from xmr_core.chapters.leaderboard import BOOK_MODELS  # the chapters the leaderboard reads, in its order

    assert LEADERBOARD_READS == tuple(dict.fromkeys(chapter for chapter, _, _ in BOOK_MODELS))


def test_the_paper_profiles_load_in_workers_and_use_mixed_precision_on_cuda_only(monkeypatch) -> None:
    for profile in ("paper", "paper-smoke", "cpu"):
        cfg = pcme_train_config(profile, device="cpu")
        assert cfg.num_workers == 0 and cfg.amp  # amp: fp16 autocast on CUDA only (`train.fit`)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"^DEVICE='cuda' was asked for, but torch sees no CUDA device$"):
            pcme_train_config("paper", device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pcme_train_config("paper", device="cuda").num_workers == LOADER_WORKERS >= 1
    assert pcme_train_config("paper-smoke", device="auto").num_workers == LOADER_WORKERS
    assert pcme_train_config("cpu", device="cuda").num_workers == 0  # the scenes book keeps its one-thread runs


def test_the_leaderboard_aligns_karpathys_extra_captions_to_precomps_first_five() -> None:
    from xmr_core.chapters.leaderboard import aligned_test, same_test_split

    full = Split("test", "synthetic:test", [f"i{i}" for i in range(4)], [f"c{j}" for j in range(24)],
                 [f"caption {j}" for j in range(24)], np.repeat(np.arange(4), 6))  # 6 an image, as Karpathy's json
    first5 = full.subset(np.arange(4), "test", captions=np.flatnonzero(np.arange(24) % 6 < 5))  # precomp's
    extra = full.subset(np.arange(4), "test", captions=np.flatnonzero((np.arange(24) % 6 < 5) | (np.arange(24) == 11)))
    with pytest.raises(ValueError, match="differ in captions"):
        same_test_split(extra, first5)
    aligned = aligned_test(extra, first5)  # image 1's 6th caption (index 11) dropped
    same_test_split(aligned, first5)
    assert aligned.caption_ids == [c for i, c in enumerate(full.caption_ids) if i % 6 < 5]
    assert aligned_test(first5, first5) is first5


def test_a_test_split_without_five_folds_has_no_1k_columns() -> None:
    """Real CUB's 2,933 test images do not fold into COCO's five: its '1K' values are NaN, the whole split's stand."""
    from xmr_core.evaluate import RK_COLUMNS, coco1k_missing, instance_row

    split = synthetic_split("test", 7, np.random.default_rng(0))
    scores = torch.randn(7, 35, generator=torch.Generator().manual_seed(0))
    row = instance_row(split, scores, scores)
    assert all(np.isnan(row[f"1K {c}"]) for c in [*RK_COLUMNS, "rSum"]) and np.isfinite(row["all rSum"])
    assert coco1k_missing(split) == "7 test images do not split into five equal folds: no COCO 1K protocol"
    assert coco1k_missing(synthetic_split("test", 10, np.random.default_rng(0))) == ""


def test_the_leaderboard_ranks_the_region_dvse_only_where_the_grid_data_has_regions() -> None:
    from xmr_core.chapters.leaderboard import BOOK_MODELS, REGIONS, BookData, ranked_models
    from xmr_core.experiment.protocols import ChapterData

    split = synthetic_split("test", 5, np.random.default_rng(0))  # with region features, as scenes
    data = ChapterData(split, split, split, split, None, None, 1.0)  # type: ignore[arg-type]
    assert ranked_models(BookData(data, {}, data, {})) == BOOK_MODELS
    raw = data.with_test(dataclasses.replace(split, regions=None, region_boxes=None))  # real COCO's raw images
    assert ranked_models(BookData(raw, {}, data, {})) == [m for m in BOOK_MODELS if m[1] != REGIONS]
