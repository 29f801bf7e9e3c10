"""smart_resize and Qwen plan geometry vs transformers (the oracle), over >= 10,000 sizes per config.

Oracles (transformers 5.24.0):
  - ``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize`` (torchvision module) and
    its "Copied from" twin in ``image_processing_pil_qwen2_vl`` (both are swept);
  - ``Qwen2VLImageProcessor[Pil].get_number_of_image_patches(height, width, images_kwargs)``;
  - ``Qwen2VLProcessor`` / ``Qwen3VLProcessor._get_num_multimodal_tokens(image_sizes=...)``, built
    offline with a tiny synthetic word-level tokenizer (no download needed);
  - for a few sizes, the full processor run on real pixels (``image_grid_thw``, ``pixel_values``
    rows, and the number of ``<|image_pad|>`` ids it puts in ``input_ids``).

The random part of the sweep is fresh every run; its seed (the run's ``seed`` fixture, printed in
the session header) is part of every failure message. Reproduce a failure with
``VLMPREP_TEST_SEED=<seed> pytest tests/plan/test_smart_resize_sweep.py``.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from PIL import Image

import vlmprep
from vlmprep import ImageError
from vlmprep.plan import plan_image
from vlmprep.plan import smart_resize as vp_smart_resize

pytestmark = pytest.mark.hf

# Config values from PEERS.md §2.1 / §2.2 (checkpoints) and the transformers class defaults.
#   name: (factor, min_pixels, max_pixels, patch_size, vlmprep preset, preset overrides)
CONFIGS = {
    "qwen2-vl": (28, 3136, 12_845_056, 14, "qwen2-vl", {}),
    "qwen3-vl": (32, 65_536, 16_777_216, 16, "qwen3-vl", {}),
    "class-default": (28, 3136, 1_003_520, 14, "qwen2-vl", {"max_pixels": 1_003_520}),
}
MERGE = 2
IMAGE_TOKEN = "<|image_pad|>"
PEERS_SIZES = [(1, 1), (17, 900), (900, 17), (333, 777), (1080, 1920), (3000, 4000), (10, 2000)]
ERR = "error"  # outcome of a size the family rejects (aspect ratio > 200)
MAX_REPORT = 15  # mismatches listed in a failure message


def _t(x) -> tuple:
    """Nested sequences -> nested tuples (API.md says "list of"; compare values, not types)."""
    return tuple(_t(v) for v in x) if isinstance(x, (list, tuple)) else x


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tf():
    """The transformers oracle objects, one set per config."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil_mod
    from transformers.models.qwen2_vl import image_processing_qwen2_vl as tv_mod
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    vocab = {"[UNK]": 0}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.add_tokens([IMAGE_TOKEN, "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"],
                   special_tokens=True)

    out = {"smart_resize_tv": tv_mod.smart_resize, "smart_resize_pil": pil_mod.smart_resize}
    for name, (_factor, lo, hi, patch, _, _) in CONFIGS.items():
        kw = dict(size={"shortest_edge": lo, "longest_edge": hi}, patch_size=patch, merge_size=MERGE)
        if name == "qwen3-vl":
            kw.update(image_mean=[0.5] * 3, image_std=[0.5] * 3)
            proc_cls, video_cls = Qwen3VLProcessor, Qwen3VLVideoProcessor
        else:
            proc_cls, video_cls = Qwen2VLProcessor, Qwen2VLVideoProcessor
        pil = pil_mod.Qwen2VLImageProcessorPil(**kw)
        if name == "class-default":  # really the class defaults: no size given
            pil = pil_mod.Qwen2VLImageProcessorPil()
            assert dict(pil.size) == {"shortest_edge": lo, "longest_edge": hi}, pil.size
        out[name] = {
            "pil": pil,
            "tv": tv_mod.Qwen2VLImageProcessor(**kw),
            "proc": proc_cls(image_processor=pil, tokenizer=tok, video_processor=video_cls()),
        }
    return out


# -- the sweep ------------------------------------------------------------------------------------
def _edges(factor: int, hi: int = 8000) -> list[int]:
    """Sides at every rounding edge: k*F + F/2 (exact half: round-half-to-even) and +-1."""
    half = factor // 2
    return sorted({k * factor + half + d for k in range(0, hi // factor + 1) for d in (-1, 0, 1)
                   if 1 <= k * factor + half + d <= hi})


def _around(x: int, factor: int) -> list[int]:
    """Sides whose round(side / F) is x/F or a neighbour, just inside/outside the half-way points."""
    half = factor // 2
    return [v for v in (x - half, x - half + 1, x, x + half - 1, x + half) if v >= 1]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]


def sweep_sizes(factor: int, lo: int, hi: int, rng: random.Random) -> list[tuple[int, int]]:
    s: set[tuple[int, int]] = set()

    def add(h: int, w: int, both: bool = True) -> None:
        if h >= 1 and w >= 1:
            s.add((h, w))
            if both:
                s.add((w, h))

    # tiny: every size up to (F+4)^2, including 1x1 and all the rounds-to-zero sides
    for h in range(1, factor + 5):
        for w in range(1, factor + 5):
            add(h, w, both=False)
    # 1xN, Nx1 and 2xN around the aspect limit (1x200 ok, 1x201 rejected) and far beyond it
    for n in list(range(1, 262)) + [300, 399, 400, 401, 402, 599, 600, 601, 1000, 4000, 8000]:
        add(1, n)
        add(2, n)
    # aspect ratio exactly at, just below and just above 200
    for short in list(range(1, 65)) + [99, 100, 101, 127, 128, 333, 500, 841]:
        for long in (200 * short - 1, 200 * short, 200 * short + 1):
            add(short, long)
    # every rounding edge of one side, against a spread of other sides (edges too)
    edges = _edges(factor)
    n = len(edges)
    for i, e in enumerate(edges):
        for w in (edges[(7 * i + 3) % n], edges[(13 * i + 5) % n], factor * 10, 1000, 1920, e):
            add(e, w)
    # h*w near max_pixels and near min_pixels (raw product)
    for bound in (hi, lo):
        for h in sorted({int(round(math.exp(t))) for t in np.linspace(0, math.log(20000), 90)}):
            w0 = bound // h
            for w in range(w0 - 2, w0 + 3):
                add(h, w)
    # rounded product round(h/F)*round(w/F)*F^2 just at/below/above max_pixels and min_pixels
    cells_hi, cells_lo = hi // factor ** 2, -(-lo // factor ** 2)
    for a in range(1, math.isqrt(cells_hi) + 2):
        for b in {cells_hi // a, cells_hi // a + 1}:
            for h in _around(a * factor, factor):
                for w in _around(b * factor, factor):
                    add(h, w)
    for a in range(1, math.isqrt(cells_lo) + 3):
        for b in {max(1, -(-cells_lo // a) - 1), -(-cells_lo // a), -(-cells_lo // a) + 1}:
            for h in _around(a * factor, factor):
                for w in _around(b * factor, factor):
                    add(h, w)
    # exact scalings, where beta and h/beta/F are exact in floating point
    if hi % factor ** 2 == 0:
        for a in _divisors(hi // factor ** 2):
            b = hi // factor ** 2 // a
            for num, den in ((1, 1), (2, 1), (3, 1), (3, 2), (5, 4), (1, 2)):
                if (a * factor * num) % den == 0 and (b * factor * num) % den == 0:
                    add(a * factor * num // den, b * factor * num // den)
    root = math.isqrt(lo)
    if root * root == lo:
        for d1 in [d for d in range(1, root + 1) if root % d == 0]:
            for d2 in [d for d in range(1, root + 1) if root % d == 0]:
                add(d1, d2)
    for hw in PEERS_SIZES:
        add(*hw)
    # random: fresh per run (seeded; the seed is printed)
    for _ in range(3000):
        add(rng.randint(1, 8000), rng.randint(1, 8000), both=False)
    for _ in range(2000):
        add(int(math.exp(rng.uniform(0, math.log(8000)))),
            int(math.exp(rng.uniform(0, math.log(8000)))), both=False)
    for bound in (hi, lo):
        for _ in range(1000):
            h = int(math.exp(rng.uniform(0, math.log(min(8000, bound)))))
            add(h, max(1, round(bound / h * (1 + rng.gauss(0, 0.02)))), both=False)
    return sorted(s)


def _outcome(fn, h: int, w: int, factor: int, lo: int, hi: int):
    try:
        return tuple(fn(h, w, factor, min_pixels=lo, max_pixels=hi))
    except ImageError:
        return ERR
    except ValueError:
        if fn is vp_smart_resize:  # vlmprep must raise ImageError, not a bare ValueError
            raise
        return ERR


def _report(what: str, seed: int, bad: list, cols: str = "size, transformers, vlmprep") -> str:
    head = "\n".join(f"  {b}" for b in bad[:MAX_REPORT])
    return (f"{what}: {len(bad)} mismatches (VLMPREP_TEST_SEED={seed}); first ones "
            f"({cols}):\n{head}")


@pytest.mark.parametrize("config", list(CONFIGS))
def test_smart_resize_sweep(config, tf, seed):
    """vlmprep.plan.smart_resize == transformers' smart_resize (both modules) on every size."""
    factor, lo, hi, _, _, _ = CONFIGS[config]
    sizes = sweep_sizes(factor, lo, hi, random.Random(f"{seed}-{config}"))
    assert len(sizes) >= 10_000, len(sizes)

    bad, n_err, branches = [], 0, set()
    for h, w in sizes:
        want = _outcome(tf["smart_resize_tv"], h, w, factor, lo, hi)
        want_pil = _outcome(tf["smart_resize_pil"], h, w, factor, lo, hi)
        got = _outcome(vp_smart_resize, h, w, factor, lo, hi)
        if not (want == want_pil == got):
            bad.append(((h, w), want, want_pil, got))
        if want == ERR:
            n_err += 1
        else:
            rounded = round(h / factor) * round(w / factor) * factor ** 2
            branches.add("floor" if rounded > hi else "ceil" if rounded < lo else "round")
    assert not bad, _report(f"smart_resize[{config}]", seed, bad,
                            "size, transformers (torchvision module), transformers (PIL module), "
                            "vlmprep")
    # the sweep really exercises every path: rejections and the three branches
    assert n_err > 100 and branches == {"floor", "ceil", "round"}, (n_err, branches)


def test_both_transformers_modules_share_smart_resize():
    """The PIL module's smart_resize is a 'Copied from' twin: same code, so one oracle for both."""
    import inspect

    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil_mod
    from transformers.models.qwen2_vl import image_processing_qwen2_vl as tv_mod
    body = lambda f: inspect.getsource(f).split(":", 1)[1]  # noqa: E731 (drop the def line)
    assert body(pil_mod.smart_resize) == body(tv_mod.smart_resize)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_plan_image_sweep(config, tf, seed):
    """plan_image geometry == transformers' get_number_of_image_patches / _get_num_multimodal_tokens.

    grid_thw oracle: transformers' ``_preprocess`` uses ``(1, resized_h // patch, resized_w // patch)``
    with the resized size from its own smart_resize.
    """
    factor, lo, hi, patch, preset, overrides = CONFIGS[config]
    pipe = vlmprep.presets.get(preset, **overrides)
    o = tf[config]
    sizes = sweep_sizes(factor, lo, hi, random.Random(f"{seed}-{config}-plan"))
    outcomes = [_outcome(tf["smart_resize_tv"], h, w, factor, lo, hi) for h, w in sizes]
    # tokens: the processor's own count (num_patches // merge**2 inside transformers)
    good = [hw for hw, want in zip(sizes, outcomes) if want != ERR]
    mm = o["proc"]._get_num_multimodal_tokens(image_sizes=good)
    tokens = dict(zip(good, mm["num_image_tokens"]))
    assert mm["num_image_patches"] == [o["pil"].get_number_of_image_patches(h, w, {})
                                       for h, w in good]
    bad = []
    for (h, w), want in zip(sizes, outcomes):
        try:
            p = plan_image(pipe, (h, w))
        except ImageError:
            if want != ERR:
                bad.append(((h, w), want, "ImageError"))
            continue
        if want == ERR:
            bad.append(((h, w), ERR, p.resized_hw))
            continue
        rh, rw = want
        nt = tokens[(h, w)]
        exp = (want, ((0, 0, rh, rw),), ((1, rh // patch, rw // patch),),
               o["pil"].get_number_of_image_patches(h, w, {}),
               o["tv"].get_number_of_image_patches(h, w, {}), nt, o["proc"].image_token * nt)
        got = (_t(p.resized_hw), _t(p.tiles), _t(p.grid_thw), p.num_patches, p.num_patches,
               p.num_tokens, p.placeholder)
        if exp != got:
            bad.append(((h, w), exp[:-1], got[:-1]))  # placeholders are long: leave them out
        del p  # keep no plan alive: 30k live objects make every GC pass slow
    assert not bad, _report(f"plan_image[{config}]", seed, bad)


def _array(h: int, w: int) -> np.ndarray:
    """An HWC uint8 array of any size without allocating it (plan reads the shape only)."""
    return np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (h, w, 3))


@pytest.mark.parametrize("config", list(CONFIGS))
def test_processor_plan_vs_transformers(config, tf, seed):
    """Processor(preset).plan(list of arrays) on ~600 sizes, incl. rejected ones (errors='skip')."""
    factor, lo, hi, patch, preset, overrides = CONFIGS[config]
    rng = random.Random(f"{seed}-{config}-processor")
    pool = sweep_sizes(factor, lo, hi, rng)
    sizes = PEERS_SIZES + [(1, 201), (201, 1), (3, 601), (1, 200)] + rng.sample(pool, 600)
    proc = vlmprep.Processor(preset, errors="skip", **overrides)
    plan = proc.plan([_array(h, w) for h, w in sizes])
    assert len(plan.images) == len(sizes)

    o = tf[config]
    ok = [hw for hw in sizes if _outcome(tf["smart_resize_tv"], *hw, factor, lo, hi) != ERR]
    mm = o["proc"]._get_num_multimodal_tokens(image_sizes=ok)
    want_tokens = dict(zip(ok, mm["num_image_tokens"]))
    bad = []
    for i, ((h, w), p) in enumerate(zip(sizes, plan.images)):
        want = _outcome(tf["smart_resize_tv"], h, w, factor, lo, hi)
        if want == ERR:
            if not (isinstance(p.error, ImageError) and p.error.index == i and p.num_tokens == 0
                    and p.num_patches == 0 and _t(p.grid_thw) == ()):
                bad.append(((h, w), ERR, p))
            continue
        rh, rw = want
        exp = (i, (h, w), want, ((1, rh // patch, rw // patch),),
               o["pil"].get_number_of_image_patches(h, w, {}), want_tokens[(h, w)], None)
        got = (p.index, _t(p.source_hw), _t(p.resized_hw), _t(p.grid_thw), p.num_patches,
               p.num_tokens, p.error)
        if exp != got:
            bad.append(((h, w), exp, got))
    assert not bad, _report(f"Processor.plan[{config}]", seed, bad)
    assert plan.num_tokens == [want_tokens.get(hw, 0) for hw in sizes]
    assert plan.total_tokens == sum(mm["num_image_tokens"])
    assert plan.total_patches == sum(mm["num_image_patches"])


# Real pixels through the full transformers processor (slowest oracle; a few sizes only).
PIXEL_SIZES = [(1, 1), (17, 900), (900, 17), (333, 777), (1080, 1920), (10, 2000), (1, 200),
               (27, 41), (42, 42), (14, 14), (255, 256), (799, 1201)]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_processor_plan_vs_transformers_pixels(config, tf):
    factor, lo, hi, patch, preset, overrides = CONFIGS[config]
    o = tf[config]
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in PIXEL_SIZES]
    plan = vlmprep.Processor(preset, **overrides).plan(images)
    pad_id = o["proc"].image_token_id
    for im, p in zip(images, plan.images):
        # given as PIL: transformers reads a (1, 1, 3) array as channels-first
        hf = o["proc"](text=[f"x {IMAGE_TOKEN} y"], images=[Image.fromarray(im)],
                       return_tensors="np")
        # image_grid_thw (1, 3) int64; pixel_values (patches, 3*2*P*P)
        assert [list(g) for g in p.grid_thw] == hf["image_grid_thw"].tolist(), (im.shape, p)
        assert p.num_patches == hf["pixel_values"].shape[0]
        assert hf["pixel_values"].shape[1] == 3 * 2 * patch * patch
        # one <|image_pad|> id per LLM token
        assert p.num_tokens == int((hf["input_ids"] == pad_id).sum()), (im.shape, p)
    assert plan.grid_thw.dtype == np.int64 and plan.grid_thw.shape == (len(images), 3)
    for p in plan.images:
        assert p.placeholder == IMAGE_TOKEN * p.num_tokens
