"""The order of Pillow's two one-dimensional resampling passes.

Shapes: sizes are ``(height, width)`` here (Pillow's ``Image.resize`` takes
``(width, height)``); ``src_hw = (H1, W1)`` is the image handed to
``Image.resize``, ``dst_hw = (H2, W2)`` the requested size.

Pillow resizes uint8 images separably: a horizontal pass (``W1 -> W2``) and a
vertical pass (``H1 -> H2``), each rounding and clipping to uint8, so the
order of the two passes changes the pixels by a few levels. Up to Pillow 12
the C function ``ImagingResampleInner`` (``src/libImaging/Resample.c``, called
by ``ImagingResample``) always ran horizontal first. Pillow 13.0.0
(python-pillow/Pillow PR #9549, "If height is scaled down significantly more
than width, resize vertically first") makes ``ImagingResampleInner`` run the
vertical pass first when that makes the second pass cheaper:

    vertical first  iff  H1 - H2 > 0  and  H1 - H2 > 2 * (W1 - W2)

in integer arithmetic on the image sizes. So: height shrinks and width grows
or is kept -> vertical first; both shrink -> vertical first only when the
height loses more than twice as many pixels as the width (a tie goes
horizontal); height grows or is kept -> horizontal first. A pass runs only if
its axis changes size; with no change at all ``Image.resize`` returns a copy.

How this was established: PR #9549's branch was read (its earlier form only
went vertical first when the height shrank and the width did not; the merged
form adds the "both shrink, height by more than twice as many pixels" case);
the released Pillow 13.0.0 wheel's ``ImagingResample`` (into which
``ImagingResampleInner`` is inlined) was disassembled, and its branch is
exactly the test above (``ysize < in_ysize`` and
``in_ysize - ysize > 2 * (in_xsize - xsize)``, on ints); and
one-shot ``Image.resize`` was checked to be bit-identical to the two-step
composition in this order for thousands of random shape pairs, for BILINEAR,
BICUBIC and LANCZOS, on noise and on photos (see
``tests/backends/test_torch_resize.py``).

Caveats (transformers' PIL backend never hits them):

* ``box``: the rule uses the image's size, not the box's, and a non-default
  box can force a pass on an axis whose size does not change.
* ``reducing_gap``: ``Image.resize`` first calls ``Image.reduce``, then runs
  the rule on the reduced image's size.
* ``nearest``: Pillow's NEAREST does not go through ``ImagingResample`` at all
  (it is a single point-sampling step, so pass order does not change the
  pixels). This function still returns the order the rule gives, so a
  separable nearest implementation may use it harmlessly.

Older Pillow (``pil_pass_order(..., pillow=(major, minor))``; default: the installed Pillow,
``pillow_version()``), read from python-pillow/Pillow's history:

* Pillow < 12.2: ``ImagingResampleInner`` always runs horizontal first (the same C code, "two-pass
  resize, horizontal pass", in every release from 7.0 to 12.3; ``Image.resize`` calls it once).
* Pillow 12.2 and 12.3: still horizontal first in C, but ``Image.resize`` (PR #9524, in Python)
  first resizes the height alone when ``H1 > 100 * W1`` and ``H2 < H1``, then the width:
  vertical first iff ``H1 > 100 * W1 and H2 < H1``.
* Pillow 13: the C rule above only (PR #9549; the 13.0.0 wheel's ``Image.resize`` has no Python rule).

The weights and the rounding are the same in all of them (``pil_resample``), so the order is
the only version-dependent part of the pixels. ``pass_order_rule()`` names the rule in use.
"""
from __future__ import annotations

import functools

__all__ = ["pil_pass_order", "pillow_version", "pass_order_rule", "describe_rule", "INTERPOLATIONS"]

#: Interpolation names this function accepts (our op-level names).
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")

_RULES = {
    "pillow>=13": "vertical first iff H1 - H2 > 0 and H1 - H2 > 2 * (W1 - W2) (Resample.c, PR #9549)",
    "pillow 12.2-12.x": "vertical first iff H1 > 100 * W1 and H2 < H1 (Image.resize, PR #9524)",
    "pillow<12.2": "always horizontal first",
}


@functools.lru_cache(maxsize=1)
def pillow_version() -> tuple[int, int]:
    """The installed Pillow's ``(major, minor)`` (``PIL.__version__``), the default of
    ``pil_pass_order``'s ``pillow``."""
    import PIL

    return _parse(PIL.__version__)


def _parse(version: str) -> tuple[int, int]:
    parts = (version.split(".") + ["0"])[:2]
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except ValueError:
        raise ValueError(f"expected a Pillow version like '13.0.0', got {version!r}") from None


def pass_order_rule(pillow: tuple[int, int] | None = None) -> str:
    """The pass-order rule ``pil_pass_order`` applies for ``pillow`` (default: the installed
    one): ``"pillow>=13"``, ``"pillow 12.2-12.x"`` or ``"pillow<12.2"`` (the keys of a report;
    ``describe_rule`` gives the rule itself)."""
    v = pillow_version() if pillow is None else tuple(pillow)
    if v >= (13, 0):
        return "pillow>=13"
    if v >= (12, 2):
        return "pillow 12.2-12.x"
    return "pillow<12.2"


def describe_rule(pillow: tuple[int, int] | None = None) -> str:
    """``pass_order_rule`` with the rule spelled out, e.g. for a GPU check's header."""
    name = pass_order_rule(pillow)
    return f"{name}: {_RULES[name]}"


def pil_pass_order(
    src_hw: tuple[int, int], dst_hw: tuple[int, int], interpolation: str,
    *, pillow: tuple[int, int] | None = None,
) -> tuple[str, ...]:
    """Return the passes ``Image.resize`` runs, in order, in Pillow ``pillow``.

    Args:
        src_hw: ``(H1, W1)`` size of the input image.
        dst_hw: ``(H2, W2)`` requested output size.
        interpolation: ``"nearest"``, ``"bilinear"``, ``"bicubic"`` or
            ``"lanczos"``. The order does not depend on the filter; for
            ``"nearest"`` Pillow runs no separable passes (see module doc)
            and the rule's order is returned anyway.
        pillow: ``(major, minor)`` of the Pillow to describe; default the installed one
            (``pillow_version()``). The examples below are Pillow 13's.

    Returns:
        ``("h", "v")`` (horizontal then vertical), ``("v", "h")``, ``("h",)``,
        ``("v",)`` or ``()`` when the size does not change.

    Examples (H, W):
        (3000, 4000) -> (2996, 4004): ("v", "h")   height down, width up
        (1080, 1920) -> (1092, 1932): ("h", "v")   height up
        (100, 100) -> (50, 80):        ("v", "h")   50 > 2 * 20
        (100, 100) -> (60, 80):        ("h", "v")   40 == 2 * 20 is a tie
        (100, 100) -> (50, 100):       ("v",)
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}"
        )
    h1, w1 = (int(v) for v in src_hw)
    h2, w2 = (int(v) for v in dst_hw)
    if min(h1, w1, h2, w2) < 1:
        raise ValueError(f"sizes must be positive, got {src_hw} -> {dst_hw}")
    need_h = w2 != w1
    need_v = h2 != h1
    rule = pass_order_rule(pillow)
    if rule == "pillow 12.2-12.x" and h1 > 100 * w1 and h2 < h1:
        return ("v", "h") if need_h else ("v",)  # Image.resize's two calls; the second copies
    if need_h and need_v:
        shrink_h = h1 - h2
        vertical_first = rule == "pillow>=13" and shrink_h > 0 and shrink_h > 2 * (w1 - w2)
        return ("v", "h") if vertical_first else ("h", "v")
    if need_h:
        return ("h",)
    if need_v:
        return ("v",)
    return ()
