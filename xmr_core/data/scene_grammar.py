"""Captions of the scenes benchmark: the attribute vocabulary, logical forms, their evaluation, and the text.

A scene is a set of objects, each with a shape, a colour, a size, a fine grid cell (row, col) and a coarse
3×3 position word derived from the cell. A caption is generated together with its `LogicalForm`:

- ``objects``: descriptors that distinct objects must match (injective "there exist");
- ``counts``: (descriptor, n): exactly n objects match the descriptor ("two red shapes", "only ...");
- ``relations``: (a, rel, b): some object matching a is left of / right of / above / below a *different*
  object matching b (strict order of their grid columns / rows).

`holds(lf, scenes)` evaluates a logical form on every scene at once, so relevance is computed, never listed;
`named(lf, scenes)` says which objects of each scene it names.
Caption levels: ``full`` (every object with every attribute plus the total count: exhaustive, so it
describes the scene up to jitter), ``partial`` (one or two objects, at least two attributes each),
``relational`` (two objects and a spatial relation), ``vague`` (a count, a colour or a shape only).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "star", "cross")
SHAPE_PLURALS: tuple[str, ...] = ("circles", "squares", "triangles", "diamonds", "stars", "crosses")
COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "orange", "purple", "cyan", "pink")
SIZES: tuple[str, ...] = ("small", "large")
# coarse 3×3 position (row-major: 0 = top left ... 8 = bottom right) -> phrase
POSITIONS: tuple[str, ...] = (
    "at the top left", "at the top", "at the top right",
    "on the left", "in the center", "on the right",
    "at the bottom left", "at the bottom", "at the bottom right",
)  # fmt: skip
RELATIONS: tuple[str, ...] = ("to the left of", "to the right of", "above", "below")
NUMBERS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")  # fmt: skip
LEVELS: tuple[str, ...] = ("full", "partial", "relational", "vague")
ANY = -1


class Desc(NamedTuple):
    """A partial description of one object; each field an index into its vocabulary or `ANY` (-1)."""

    shape: int = ANY
    colour: int = ANY
    size: int = ANY
    pos: int = ANY  # coarse 3×3 position index


@dataclass(frozen=True)
class LogicalForm:
    """What a caption asserts about a scene (see the module docstring for the semantics)."""

    objects: tuple[Desc, ...] = ()
    counts: tuple[tuple[Desc, int], ...] = ()
    relations: tuple[tuple[Desc, int, Desc], ...] = ()  # (a, index into RELATIONS, b)

    def to_json(self) -> dict:
        return {
            "objects": [list(d) for d in self.objects],
            "counts": [[list(d), n] for d, n in self.counts],
            "relations": [[list(a), r, list(b)] for a, r, b in self.relations],
        }

    @classmethod
    def from_json(cls, obj: dict) -> LogicalForm:
        return cls(
            objects=tuple(Desc(*d) for d in obj["objects"]),
            counts=tuple((Desc(*d), int(n)) for d, n in obj["counts"]),
            relations=tuple((Desc(*a), int(r), Desc(*b)) for a, r, b in obj["relations"]),
        )


@dataclass
class SceneArrays:
    """Objects of N scenes padded to K slots. attrs (N, K, 4) int16 = (shape, colour, size, pos);
    row, col (N, K) int16 fine grid cell; valid (N, K) bool."""

    attrs: np.ndarray
    row: np.ndarray
    col: np.ndarray
    valid: np.ndarray

    def __len__(self) -> int:
        return int(self.attrs.shape[0])


def _match(desc: Desc, sc: SceneArrays, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    """(n, K) bool: which objects of the selected scenes match `desc`."""
    m = sc.valid[rows].copy()
    for j, v in enumerate(desc):
        if v != ANY:
            m &= sc.attrs[rows][:, :, j] == v
    return m


def _relation(rel: int, sc: SceneArrays, rows: np.ndarray | slice) -> np.ndarray:
    """(n, K, K) bool: object i stands in relation `rel` to object j (strict grid order)."""
    row, col = sc.row[rows].astype(np.int32), sc.col[rows].astype(np.int32)
    if rel == 0:
        return col[:, :, None] < col[:, None, :]
    if rel == 1:
        return col[:, :, None] > col[:, None, :]
    if rel == 2:
        return row[:, :, None] < row[:, None, :]
    return row[:, :, None] > row[:, None, :]


def holds(lf: LogicalForm, sc: SceneArrays) -> np.ndarray:
    """(N,) bool: the logical form holds in each scene."""
    ok = np.ones(len(sc), dtype=bool)
    matches = [_match(d, sc) for d in lf.objects]
    for m in matches:
        ok &= m.any(1)
    for d, n in lf.counts:
        ok &= _match(d, sc).sum(1) == n
    for a, rel, b in lf.relations:
        pair = _match(a, sc)[:, :, None] & _match(b, sc)[:, None, :] & _relation(rel, sc, slice(None))
        ok &= pair.any((1, 2))  # strict order implies distinct objects
    if len(matches) > 1:
        # Injective assignment of descriptors to distinct objects: Hall's condition on every subset,
        # checked only on the scenes that passed the cheap tests above.
        cand = np.flatnonzero(ok)
        sub = np.stack([m[cand] for m in matches], 1)  # (n, p, K)
        for r in range(2, len(matches) + 1):
            for s in itertools.combinations(range(len(matches)), r):
                ok[cand] &= sub[:, list(s)].any(1).sum(1) >= r
    return ok


def named(lf: LogicalForm, sc: SceneArrays) -> np.ndarray:
    """(N, K) bool: the objects of each scene that the logical form names, i.e. that match one of its descriptors
    (its objects, its counted descriptors, either side of its relations); "two shapes" names every object."""
    descs = [*lf.objects, *(d for d, _ in lf.counts), *(d for a, _, b in lf.relations for d in (a, b))]
    out = np.zeros(sc.valid.shape, dtype=bool)
    for d in descs:
        out |= _match(d, sc)
    return out


# --------------------------------------------------------------------------------------------- text


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def noun_phrase(d: Desc) -> str:
    """'a large red circle at the top left', 'a blue shape', 'an orange star' ..."""
    words = []
    if d.size != ANY:
        words.append(SIZES[d.size])
    if d.colour != ANY:
        words.append(COLOURS[d.colour])
    words.append(SHAPES[d.shape] if d.shape != ANY else "shape")
    text = f"{_article(words[0])} {' '.join(words)}"
    return text if d.pos == ANY else f"{text} {POSITIONS[d.pos]}"


def join_list(items: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def count_phrase(d: Desc, n: int) -> str:
    """'three shapes', 'one shape', 'two red shapes', 'two circles', 'one large star'."""
    words = [NUMBERS[n]]
    if d.size != ANY:
        words.append(SIZES[d.size])
    if d.colour != ANY:
        words.append(COLOURS[d.colour])
    if d.shape != ANY:
        words.append(SHAPES[d.shape] if n == 1 else SHAPE_PLURALS[d.shape])
    else:
        words.append("shape" if n == 1 else "shapes")
    return " ".join(words)


# ---------------------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class Caption:
    text: str
    level: str
    lf: LogicalForm


def _full_desc(obj: np.ndarray) -> Desc:
    return Desc(int(obj[0]), int(obj[1]), int(obj[2]), int(obj[3]))


def full_caption(objs: np.ndarray, rng: np.random.Generator) -> Caption:
    """Every object with every attribute, plus the total count (so the caption is exhaustive)."""
    descs = [_full_desc(o) for o in objs]
    lf = LogicalForm(objects=tuple(descs), counts=((Desc(), len(descs)),))
    body = join_list([noun_phrase(d) for d in descs])
    template = int(rng.integers(3))
    if template == 0:
        text = f"only {body}"
    elif template == 1:
        text = f"{body} and nothing else"
    else:
        text = f"exactly {count_phrase(Desc(), len(descs))}: {body}"
    return Caption(text, "full", lf)


def _partial_desc(
    obj: np.ndarray, rng: np.random.Generator, fields: tuple[int, ...], min_fields: int
) -> Desc:
    """Keep a random subset (at least `min_fields`) of the given attribute fields of one object."""
    k = int(rng.integers(min_fields, len(fields) + 1))
    keep = set(rng.choice(fields, size=k, replace=False).tolist())
    return Desc(*(int(obj[j]) if j in keep else ANY for j in range(4)))


def partial_caption(objs: np.ndarray, rng: np.random.Generator) -> Caption:
    """One or two objects (never all of several), each with at least two of its four attributes."""
    k = len(objs)
    n = 1 if k <= 2 else int(rng.integers(1, 3))
    pick = rng.choice(k, size=n, replace=False)
    descs = [_partial_desc(objs[i], rng, (0, 1, 2, 3), 2) for i in sorted(pick)]
    body = join_list([noun_phrase(d) for d in descs])
    text = body if rng.random() < 0.5 else f"there is {body}"
    return Caption(text, "partial", LogicalForm(objects=tuple(descs)))


def relational_caption(objs: np.ndarray, cells: np.ndarray, rng: np.random.Generator) -> Caption | None:
    """Two objects (two of shape/colour/size each) and a relation that holds; None with one object."""
    if len(objs) < 2:
        return None
    i, j = (int(x) for x in rng.choice(len(objs), size=2, replace=False))
    (ri, ci), (rj, cj) = cells[i], cells[j]
    rels = ([0] if ci < cj else [1] if ci > cj else []) + ([2] if ri < rj else [3] if ri > rj else [])
    rel = int(rng.choice(rels))
    a = _partial_desc(objs[i], rng, (0, 1, 2), 2)
    b = _partial_desc(objs[j], rng, (0, 1, 2), 2)
    text = f"{noun_phrase(a)} {RELATIONS[rel]} {noun_phrase(b)}"
    return Caption(text, "relational", LogicalForm(relations=((a, rel, b),)))


def vague_caption(objs: np.ndarray, rng: np.random.Generator) -> Caption:
    """A total count, a colour, a shape, or the count of one colour or shape. Never size or position
    alone: those hold in most images and say almost nothing."""
    kind = int(rng.integers(4))
    obj = objs[int(rng.integers(len(objs)))]
    if kind == 0:
        d, n = Desc(), len(objs)
        return Caption(count_phrase(d, n), "vague", LogicalForm(counts=((d, n),)))
    if kind == 1:
        d = Desc(colour=int(obj[1]))
        return Caption(f"something {COLOURS[d.colour]}", "vague", LogicalForm(objects=(d,)))
    if kind == 2:
        d = Desc(shape=int(obj[0]))
        return Caption(noun_phrase(d), "vague", LogicalForm(objects=(d,)))
    d = Desc(colour=int(obj[1])) if rng.random() < 0.5 else Desc(shape=int(obj[0]))
    n = int(sum(_match(d, _one_scene(objs))[0]))
    return Caption(count_phrase(d, n), "vague", LogicalForm(counts=((d, n),)))


def _one_scene(objs: np.ndarray) -> SceneArrays:
    k = len(objs)
    return SceneArrays(
        attrs=objs[None, :, :4].astype(np.int16),
        row=np.zeros((1, k), np.int16),
        col=np.zeros((1, k), np.int16),
        valid=np.ones((1, k), bool),
    )


def image_captions(objs: np.ndarray, cells: np.ndarray, n: int, rng: np.random.Generator) -> list[Caption]:
    """`n` captions for one scene: full, partial, relational (partial with one object), vague, then
    partial or vague. objs (k, 4) = (shape, colour, size, pos); cells (k, 2) = (row, col)."""
    out = [full_caption(objs, rng), partial_caption(objs, rng)]
    out.append(relational_caption(objs, cells, rng) or partial_caption(objs, rng))
    out.append(vague_caption(objs, rng))
    while len(out) < n:
        out.append(partial_caption(objs, rng) if rng.random() < 0.5 else vague_caption(objs, rng))
    return out[:n]


def vocabulary() -> list[str]:
    """Every word the grammar can emit (lower case, punctuation excluded)."""
    words = set(SHAPES + SHAPE_PLURALS + COLOURS + SIZES + NUMBERS[1:])
    for phrase in POSITIONS + RELATIONS:
        words.update(phrase.split())
    words.update(
        [
            "a",
            "an",
            "only",
            "and",
            "nothing",
            "else",
            "exactly",
            "shape",
            "shapes",
            "there",
            "is",
            "something",
        ]
    )
    return sorted(words)
