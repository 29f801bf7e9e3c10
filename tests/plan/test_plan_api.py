"""The Plan object API (API.md "plan(images) -> Plan") for qwen2-vl / qwen3-vl.

Expected geometry is copied from PEERS.md §2.1 / §2.2 (tables measured with transformers 5.24.0),
never computed by vlmprep.
"""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import vlmprep
from vlmprep import ImageError, Processor

TOKEN = "<|image_pad|>"

# PEERS §2.1 (qwen2-vl checkpoint): (H, W) -> resized (H', W'), grid_thw, num_patches, num_tokens
QWEN2 = {
    (1, 1): ((56, 56), (1, 4, 4), 16, 4),
    (17, 900): ((28, 896), (1, 2, 64), 128, 32),
    (900, 17): ((896, 28), (1, 64, 2), 128, 32),
    (333, 777): ((336, 784), (1, 24, 56), 1344, 336),
    (1080, 1920): ((1092, 1932), (1, 78, 138), 10764, 2691),
}
# PEERS §2.2 (qwen3-vl checkpoint); num_patches = t*h*w of the stated grid
QWEN3 = {
    (1, 1): ((256, 256), (1, 16, 16), 256, 64),
    (17, 900): ((64, 1888), (1, 4, 118), 472, 118),
    (333, 777): ((320, 768), (1, 20, 48), 960, 240),
    (1080, 1920): ((1088, 1920), (1, 68, 120), 8160, 2040),
}


def _arr(h: int, w: int, seed: int = 0) -> np.ndarray:
    """HWC uint8 RGB."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _pil(h: int, w: int) -> Image.Image:
    return Image.new("RGB", (w, h), (10, 20, 30))  # PIL size is (W, H)


@pytest.mark.parametrize("preset,table", [("qwen2-vl", QWEN2), ("qwen3-vl", QWEN3)])
def test_image_fields_arrays_and_pil(preset, table):
    sizes = list(table)
    # alternate numpy arrays and PIL images
    images = [_arr(h, w) if i % 2 == 0 else _pil(h, w) for i, (h, w) in enumerate(sizes)]
    plan = Processor(preset).plan(images)
    assert len(plan.images) == len(sizes)
    for i, ((h, w), p) in enumerate(zip(sizes, plan.images)):
        (rh, rw), grid, patches, tokens = table[(h, w)]
        assert p.index == i
        assert tuple(p.source_hw) == (h, w)
        assert tuple(p.resized_hw) == (rh, rw)
        assert [tuple(t) for t in p.tiles] == [(0, 0, rh, rw)]  # untiled: one box, the whole resized image
        assert [tuple(g) for g in p.grid_thw] == [grid]
        assert p.num_patches == patches
        assert p.num_tokens == tokens
        assert p.placeholder == TOKEN * tokens
        assert p.error is None

    # shortcuts
    assert plan.num_tokens == [table[s][3] for s in sizes]
    assert isinstance(plan.grid_thw, np.ndarray)
    assert plan.grid_thw.dtype == np.int64 and plan.grid_thw.shape == (len(sizes), 3)
    np.testing.assert_array_equal(plan.grid_thw, [table[s][1] for s in sizes])
    assert plan.total_tokens == sum(table[s][3] for s in sizes)
    assert plan.total_patches == sum(table[s][2] for s in sizes)


def test_plan_reads_no_pixels():
    """Header-only: a 3000x4000 array view that owns no pixel memory plans like PEERS says."""
    big = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (3000, 4000, 3))
    p = Processor("qwen2-vl").plan([big]).images[0]
    # PEERS §2.1: 3000x4000 -> 2996x4004, (1, 214, 286), 61204 patches, 15301 tokens
    assert (tuple(p.resized_hw), tuple(p.grid_thw[0]), p.num_patches, p.num_tokens) == (
        (2996, 4004), (1, 214, 286), 61204, 15301)


@pytest.mark.parametrize("bad,why", [
    (np.zeros((1, 300, 3), np.uint8), "aspect 300 > 200"),
    (np.zeros((300, 1, 3), np.uint8), "aspect 300 > 200"),
    (np.zeros((20, 30, 3), np.float32), "float array"),
    (np.zeros((20, 30), np.uint8), "no channel axis"),
    (Image.new("RGB", (300, 1)), "PIL, aspect 300 > 200"),
])
def test_errors_skip_records_bad_item(bad, why):
    images = [_arr(333, 777), bad, _pil(1, 1)]
    plan = Processor("qwen2-vl", errors="skip").plan(images)
    good0, b, good2 = plan.images
    assert isinstance(b.error, ImageError), why
    assert isinstance(b.error, ValueError)
    assert b.error.index == 1 and b.index == 1
    assert b.num_tokens == 0 and b.num_patches == 0 and len(b.grid_thw) == 0
    # the others are untouched (PEERS §2.1: 333x777 -> 336 tokens, 1x1 -> 4)
    assert good0.error is None and good2.error is None
    assert plan.num_tokens == [336, 0, 4]
    # grid_thw holds the good images' sequences only, in input order
    np.testing.assert_array_equal(plan.grid_thw, [(1, 24, 56), (1, 4, 4)])
    assert plan.total_tokens == 340 and plan.total_patches == 1344 + 16


@pytest.mark.parametrize("bad_at", [0, 2])
def test_errors_raise_names_the_index(bad_at):
    images = [_arr(17, 900), _pil(333, 777), _arr(50, 60)]
    images.insert(bad_at, np.zeros((1, 300, 3), np.uint8))  # aspect 300 > 200
    with pytest.raises(ImageError) as ei:
        Processor("qwen2-vl", errors="raise").plan(images)
    assert ei.value.index == bad_at
    assert "200" in str(ei.value)  # names the limit it broke


def test_errors_raise_first_bad_image():
    images = [_arr(17, 900), np.zeros((5, 5, 3), np.float32), np.zeros((1, 300, 3), np.uint8)]
    with pytest.raises(ImageError) as ei:
        Processor("qwen2-vl").plan(images)  # errors="raise" is the default
    assert ei.value.index == 1


def test_max_pixels_override():
    # PEERS §2.1: with max_pixels 1,003,520, 1080x1920 -> 728x1316, 1222 tokens;
    # 3000x4000 -> 840x1148, 1230 tokens
    proc = Processor("qwen2-vl", max_pixels=1_003_520)
    plan = proc.plan([_arr(1080, 1920), _pil(3000, 4000)])
    assert [tuple(p.resized_hw) for p in plan.images] == [(728, 1316), (840, 1148)]
    assert plan.num_tokens == [1222, 1230]
    assert plan.images[0].placeholder == TOKEN * 1222
    # the same sizes with the checkpoint default are not capped (PEERS: 2691, 15301)
    assert Processor("qwen2-vl").plan([_arr(1080, 1920), _pil(3000, 4000)]).num_tokens == [
        2691, 15301]


def test_bare_single_image_is_a_batch_of_one():
    plan = Processor("qwen2-vl").plan(_arr(333, 777))
    assert len(plan.images) == 1 and plan.num_tokens == [336]


SMALL = [(1, 1), (17, 90), (30, 40), (60, 100), (5, 7), (28, 28), (100, 57)]


@pytest.mark.parametrize("preset", ["qwen2-vl", "qwen3-vl"])
def test_plan_equals_call(preset):
    """plan() is what proc(images) executes (reference backend, small images)."""
    images = [_arr(h, w, seed=i) if i % 2 else _pil(h, w) for i, (h, w) in enumerate(SMALL)]
    proc = Processor(preset, backend="reference")
    plan = proc.plan(images)
    batch = proc(images)
    np.testing.assert_array_equal(np.asarray(batch.grid_thw), plan.grid_thw)
    assert batch.num_tokens == plan.num_tokens
    assert batch.pixel_values.shape[0] == plan.total_patches
    # row length 3*2*P*P: 1176 (qwen2-vl, P=14), 1536 (qwen3-vl, P=16) per PEERS
    assert batch.pixel_values.shape[1] == {"qwen2-vl": 1176, "qwen3-vl": 1536}[preset]
    assert list(batch.seqlens) == [p.num_patches for p in plan.images]


def test_plan_equals_call_with_skipped_image():
    images = [_arr(30, 40), np.zeros((1, 300, 3), np.uint8), _pil(17, 90)]
    proc = Processor("qwen2-vl", backend="reference", errors="skip")
    plan = proc.plan(images)
    batch = proc(images)
    assert batch.num_tokens == plan.num_tokens and batch.num_tokens[1] == 0
    np.testing.assert_array_equal(np.asarray(batch.grid_thw), plan.grid_thw)
    assert batch.pixel_values.shape[0] == plan.total_patches
    assert set(batch.errors) == {1} and plan.images[1].error is not None


def test_plan_is_exported():
    assert isinstance(Processor("qwen2-vl").plan([_arr(5, 5)]), vlmprep.Plan)


def test_rule_registry_is_loud(monkeypatch):
    # One rule per sizing op: a second one, or a rule for a non-sizing op, is refused at import;
    # a sizing op without a rule is named when a plan needs it.
    from vlmprep.plan import plan_image
    from vlmprep.plan.plan import SIZING_RULES, sizing_rule
    with pytest.raises(RuntimeError, match="defined twice"):
        sizing_rule("smart_resize")(lambda op, hw, pipeline: None)
    with pytest.raises(RuntimeError, match="sizing op"):
        sizing_rule("normalize")(lambda op, hw, pipeline: None)
    monkeypatch.delitem(SIZING_RULES, "smart_resize")
    with pytest.raises(NotImplementedError, match="'smart_resize'"):
        plan_image(vlmprep.presets.get("qwen2-vl"), (10, 10))


def test_hf_form_registry_is_loud():
    from vlmprep.hf_forms import hf_form
    with pytest.raises(RuntimeError, match="defined twice"):
        hf_form("qwen2_vl")(lambda b: {})
    with pytest.raises(RuntimeError, match="HF_OUTPUTS"):  # the registry is the list: no typo list
        hf_form("not a form")(lambda b: {})
    with pytest.raises(RuntimeError, match="other than 'auto'"):
        hf_form("auto")(lambda b: {})


# -- issue 17 item 4: no silent wrong geometry ----------------------------------------------------
def test_tiles_whose_patch_grid_the_merger_cannot_join_are_refused():
    # 384 / 14 = 27 patches per side: a 2x2 merger cannot join them (the count used to floor).
    pipe = vlmprep.Pipeline([vlmprep.ops.resize(mode="fixed", height=384, width=384),
                             vlmprep.ops.patchify(patch_size=14, merge_size=2, order="tiles")])
    with pytest.raises(ValueError, match=r"multiples of merge_size = 2, got 27x27 patches.*"
                                         r"multiple of patch_size\*merge_size = 28"):
        Processor(pipe).plan([_arr(10, 10)])
    ok = pipe.replace(merge_size=3)  # 27 = 3 * 9
    assert Processor(ok).plan([_arr(10, 10)]).num_tokens == [81]


def test_a_plain_vit_pipeline_gets_plain_vit_defaults():
    # A CLIP-like pipeline as docs/concepts.md writes it: one token per patch, "<image>".
    pipe = vlmprep.Pipeline([vlmprep.ops.resize(mode="shortest_edge", size=224),
                             vlmprep.ops.center_crop(height=224, width=224),
                             vlmprep.ops.normalize(),
                             vlmprep.ops.patchify(patch_size=14, order="tiles")])
    p = Processor(pipe).plan([_arr(300, 400)])[0]
    assert p.grid_thw == [(1, 16, 16)] and p.num_tokens == 256
    assert p.placeholder == "<image>" * 256
    pf = vlmprep.ops.patchify()
    assert (pf.temporal_patch_size, pf.merge_size, vlmprep.ops.pack().image_token) == (1, 1, "<image>")


def test_plan_repr_abbreviates_long_fields():
    p = Processor("qwen2-vl").plan([_arr(4000, 3000)])
    assert len(p[0].placeholder) > 100_000
    r = repr(p)
    assert len(r) < 2000, len(r)
    assert f"... ({len(p[0].placeholder)} chars)" in r and "resized_hw=(" in r
    many = Processor("internvl").plan([_arr(1080, 1920)])[0]  # 9 tiles: the list is shortened
    assert "... (9 items)" in repr(many) and repr(many).startswith("ImagePlan(index=0, ")
