"""Which relevance views a chapter's data has, and what a table or claim that needs a missing one says instead.

The scenes benchmark has every view (instance, class, plausible, exact); the papers' data sets have what they
annotate (`docs/data.md`): class relevance on CUB (its 200 classes), plausible matches on COCO (concept labels from
its instances files, PCME's PMRP), instance relevance everywhere, exact relevance nowhere, so no Bayes ceiling.
A chapter computes each table's values only where its view is present; a value without its view is NaN, and a
claim on it is "not tested" with the reason (`not_tested`), never a crash:

    missing = missing_views({"class": data.test_unseen, "plausible": data.test}, run.dataset)
    ->  {"plausible": "cub has no plausible relevance on its test split (concept labels: COCO's instances files)"}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from xmr_core.ceiling import bayes_ceiling
from xmr_core.claims import ClaimSpec, Evidence, Judgement, judge
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split

VIEW_SOURCE: dict[str, str] = {
    "class": "image classes: CUB's",
    "plausible": "concept labels: COCO's instances files",
    "exact": "each caption's truth in every image: only the scenes benchmark knows it",
}
DATASET_NAMES: dict[str, str] = {"coco": "COCO", "f30k": "Flickr30K", "cub": "CUB", "vg": "Visual Genome",
                                 "scenes": "scenes"}


def missing_view(split: Split, view: str, dataset: str) -> str:
    """'' when `split` has relevance `view`; else one line naming the data set, the split and the view."""
    if view in split.views():
        return ""
    return (f"{DATASET_NAMES.get(dataset, dataset)} has no {view} relevance on its {split.name} split "
            f"({VIEW_SOURCE.get(view, 'not annotated')})")


def missing_views(needs: Mapping[str, Split], dataset: str) -> dict[str, str]:
    """{view: reason} of each view of `needs` ({view: the split it is measured on}) that its split lacks."""
    return {view: reason for view, split in needs.items() if (reason := missing_view(split, view, dataset))}


def no_ceiling(dataset: str) -> str:
    """Why a table of real data has no Bayes ceiling row."""
    name = DATASET_NAMES.get(dataset, dataset)
    return f"no ceiling: {name}'s relevance is annotated, not exact"


def ceiling_caption(split: Split, dataset: str) -> str:
    """The sentence a table's caption gets on real data (`no_ceiling`); '' where the split has exact relevance."""
    return "" if split.exact is not None else f" ({no_ceiling(dataset)}.)"


def ceiling_rsum(split: Split) -> float | None:
    """The Bayes ceiling's instance rSum of `split` (`ceiling.bayes_ceiling`); None without exact relevance."""
    return None if split.exact is None else bayes_ceiling(split)["rsum"]


def not_tested(spec: ClaimSpec, reason: str) -> Judgement:
    """`spec` not tested because its data lacks a view: `reason` (`missing_view`)."""
    return Judgement(spec, "not tested", reason=reason)


def missing_reason(needs: str | Sequence[str], missing: Mapping[str, str] | None) -> str:
    """Why a metric that needs the view (or views and protocols, e.g. ("plausible", "1K")) `needs` cannot be measured:
    the first of them in `missing` ({view: reason}); '' when it can."""
    return next((missing[n] for n in ((needs,) if isinstance(needs, str) else needs) if n in (missing or {})), "")


def judge_viewed(specs: Sequence[ClaimSpec], evidence: Mapping[str, Callable[[], Mapping[str, Evidence]]],
                 views: Mapping[str, str | tuple[str, ...]], missing: Mapping[str, str] | None, run: RunConfig
                 ) -> list[Judgement]:
    """Every claim of `specs` judged (`claims.judge`) on the evidence of its metric, built only when judged
    (`evidence`: {metric: a function returning {model: Evidence}}); a claim whose metric needs a view (`views`,
    {metric: view or views}; absent: instance) in `missing` ({view: reason}, `missing_reason`) is not tested with
    the reason, its evidence never built (its values are NaN)."""
    out, built = [], {}
    for spec in specs:
        if reason := missing_reason(views.get(spec.metric, "instance"), missing):
            out.append(not_tested(spec, reason))
            continue
        if spec.metric not in built:
            built[spec.metric] = evidence[spec.metric]()
        out.append(judge(spec, built[spec.metric], dataset=run.dataset, profile=run.profile))
    return out
