"""The public extension point (issue 17 item 3): a model family's sizing written with the public
API only (``vlmprep.ops.SizingOp`` + ``@vlmprep.plan.sizing_rule``), registered at any time, run on
every backend without backend code.

docs/how-to/new-family.md is executed here (its ```python blocks, in order, as one module), and
its Phi-3-vision rule is checked against the published processor: the token formula and HD sizes
of ``image_processing_phi3_v.py`` for many sizes (451x300 -> 1921), the HD crops' pixels against
that processor's PIL steps, the same geometry on every backend and equal reference / torch pixels.
"""
from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from _support.devices import devices
from PIL import Image

import vlmprep
from vlmprep import ops, plan
from vlmprep.plan import SIZING_RULES

DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "new-family.md"


@pytest.fixture(scope="module")
def doc():
    """The how-to's code blocks run as one module; the registries are restored afterwards."""
    saved_ops, saved_rules = dict(ops.OP_TYPES), dict(SIZING_RULES)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4, "the how-to lost its code blocks"
    mod = types.ModuleType("vlmprep_howto_new_family")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    try:
        exec(compile("\n\n".join(blocks), str(DOC), "exec"), mod.__dict__)
        yield mod
    finally:
        sys.modules.pop(mod.__name__, None)
        ops.OP_TYPES.clear(), ops.OP_TYPES.update(saved_ops)
        SIZING_RULES.clear(), SIZING_RULES.update(saved_rules)


# -- the published processor (image_processing_phi3_v.py), written as it is there ----------------
def _hd_resized(width: int, height: int, hd_num: int) -> tuple[int, int]:
    """HD_transform's resize of a landscape (width >= height) image: the largest scale whose
    ``scale x ceil(scale / ratio)`` 336-crops fit ``hd_num`` -> (new_w, new_h)."""
    ratio = width / height
    scale = 1
    while scale * np.ceil(scale / ratio) <= hd_num:
        scale += 1
    scale -= 1
    new_w = int(scale * 336)
    return new_w, int(new_w / ratio)


def published_hd_size(width: int, height: int, hd_num: int = 16) -> tuple[int, int] | None:
    """HD_transform + padding_336 on a PIL (width, height) -> the padded (width, height); None
    where the processor would resize a side to 0."""
    trans = width < height
    if trans:
        width, height = height, width
    new_w, new_h = _hd_resized(width, height, hd_num)
    if new_h < 1:
        return None
    tar = int(np.ceil(new_h / 336) * 336)
    return (tar, new_w) if trans else (new_w, tar)


def published_num_img_tokens(width: int, height: int, hd_num: int = 16) -> int:
    """Phi3VImageProcessor.calc_num_image_tokens_from_image_size."""
    padded = published_hd_size(width, height, hd_num)
    assert padded is not None
    w, h = padded
    return int((h // 336 * w // 336 + 1) * 144 + 1 + (h // 336 + 1) * 12)


def published_hd_crops(img: Image.Image, hd_num: int = 16) -> np.ndarray:
    """The processor's HD image (PIL bilinear resize of the landscape view, white centred pad)
    cut into 336 crops row-major: uint8 (n, 336, 336, 3)."""
    width, height = img.size
    trans = width < height
    if trans:
        img = img.transpose(Image.Transpose.TRANSPOSE)
        width, height = img.size
    new_w, new_h = _hd_resized(width, height, hd_num)
    img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
    tar = int(np.ceil(new_h / 336) * 336)
    top = int((tar - new_h) / 2)
    padded = Image.new("RGB", (new_w, tar), (255, 255, 255))
    padded.paste(img, (0, top))
    if trans:
        padded = padded.transpose(Image.Transpose.TRANSPOSE)
    a = np.asarray(padded)
    h, w = a.shape[:2]
    return (a.reshape(h // 336, 336, w // 336, 336, 3).transpose(0, 2, 1, 3, 4)
            .reshape(-1, 336, 336, 3))


SIZES = [(300, 451), (451, 300), (1, 1), (336, 336), (335, 337), (1080, 1920), (1920, 1080),
         (3000, 4000), (17, 900), (900, 17), (1000, 1), (224, 224), (480, 640), (2048, 100)]


def test_howto_phi3v_tokens_match_the_published_formula(doc, seed):
    proc = vlmprep.Processor(doc.phi3v, backend="reference")
    rng = np.random.default_rng(seed)
    sizes = SIZES + [tuple(int(v) for v in rng.integers(1, 4097, 2)) for _ in range(200)]
    assert proc.plan([np.zeros((1, 1, 3), np.uint8)]).num_tokens == [published_num_img_tokens(1, 1)]
    for h, w in sizes:
        padded = published_hd_size(w, h)
        ip = plan.plan_image(doc.phi3v, (h, w))
        pw, ph = padded  # type: ignore[misc]
        assert ip.canvases[0].hw == (ph, pw), (h, w)
        assert ip.num_tokens == published_num_img_tokens(w, h), (h, w)
        assert len(ip.tiles) == 1 + (ph // 336) * (pw // 336) <= 1 + 16
        assert ip.placeholder == "<|image|>" * ip.num_tokens
    assert plan.plan_image(doc.phi3v, (300, 451)).num_tokens == 1921  # the check value
    assert plan.plan_image(doc.phi3v, (451, 300)).num_tokens == 1933
    # num_crops as the checkpoint sets it (Phi-3.5-vision's multi-frame 4)
    four = doc.phi3v.replace(num_crops=4)
    for h, w in SIZES:
        assert plan.plan_image(four, (h, w)).num_tokens == published_num_img_tokens(w, h, 4)


def test_howto_phi3v_refuses_what_the_processor_cannot_resize(doc):
    assert published_hd_size(20000, 1) is None
    p = vlmprep.Processor(doc.phi3v, backend="reference", errors="skip").plan(
        [np.zeros((1, 20000, 3), np.uint8), np.zeros((30, 40, 3), np.uint8)])
    assert isinstance(p.images[0].error, vlmprep.ImageError) and p.num_tokens[0] == 0
    assert "phi3v_hd" in str(p.images[0].error) and p.images[1].ok


@pytest.mark.parametrize("device", devices())
def test_howto_phi3v_on_every_backend(doc, seed, device):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, hw + (3,), dtype=np.uint8) for hw in [(300, 451), (451, 300), (61, 97)]]
    want_plan = vlmprep.Processor(doc.phi3v, backend="reference").plan(imgs)
    ref = vlmprep.Processor(doc.phi3v, backend="reference", dtype="uint8")(imgs).pixel_values
    ran = []
    for backend in vlmprep.backends.available():
        if device == "cuda" and backend == "reference":
            continue
        b = vlmprep.Processor(doc.phi3v, backend=backend, device=device, dtype="uint8")(imgs)
        assert b.num_tokens == want_plan.num_tokens, backend
        assert b.grid_thw.tolist() == want_plan.grid_thw.tolist(), backend
        assert b.image_index.tolist() == [i for i, p in enumerate(want_plan) for _ in p.tiles]
        assert tuple(b.pixel_values.shape) == tuple(ref.shape) == (
            sum(len(p.tiles) for p in want_plan), 3, 336, 336)
        diff = (b.pixel_values.cpu().int() - ref.int()).abs().max().item()
        if backend in ("reference", "torch") and device == "cpu" and vlmprep.kernels.available():
            assert diff == 0, backend  # the compiled resize is Pillow's: the same bytes
        else:  # torchvision's / DALI's resizes (docs/concepts.md: at most 3 levels)
            assert diff <= 3, (backend, diff)
        ran.append(backend)
    assert "torch" in ran


def test_howto_phi3v_hd_crops_are_the_processors(doc, seed):
    # The HD crops (every tile but the first, the global view) against the processor's PIL steps.
    rng = np.random.default_rng(seed)
    proc = vlmprep.Processor(doc.phi3v, backend="reference", dtype="uint8")
    for hw, tol in [((300, 451), 0), ((123, 500), 0), ((451, 300), 1)]:  # portrait: pass order
        img = rng.integers(0, 256, hw + (3,), dtype=np.uint8)
        got = proc([img]).pixel_values[1:].permute(0, 2, 3, 1).numpy()
        want = published_hd_crops(Image.fromarray(img))
        assert got.shape == want.shape, hw
        assert np.abs(got.astype(int) - want.astype(int)).max() <= tol, hw


# -- registration at any time ---------------------------------------------------------------------
def test_a_sizing_op_defined_after_a_processor_runs_on_every_backend(seed):
    backends = vlmprep.backends.available()
    for b in backends:  # every backend module imported, a Processor made, before the op exists
        vlmprep.Processor("qwen2-vl", backend=b)
    saved_ops, saved_rules = dict(ops.OP_TYPES), dict(SIZING_RULES)
    try:
        @dataclass(frozen=True)
        class letterbox(ops.SizingOp):
            """Aspect-fit into a ``size`` square, pad grey, centred."""
            name: ClassVar[str] = "letterbox_test"
            size: int = 56
            interpolation: str = "bilinear"

            @property
            def tile_hw(self):
                return (self.size, self.size)

        @plan.sizing_rule(letterbox)
        def _letterbox(op, hw, pipeline):
            s = op.size / max(hw)
            rh, rw = max(1, round(hw[0] * s)), max(1, round(hw[1] * s))
            c = plan.Canvas((rh, rw), size=(op.size, op.size),
                            offset=((op.size - rh) // 2, (op.size - rw) // 2), fill=(128, 128, 128))
            return plan.Sizing([c], [(0, 0, op.size, op.size)], [0])

        pipe = vlmprep.Pipeline([letterbox(), ops.patchify(patch_size=14, order="tiles")])
        img = np.random.default_rng(seed).integers(0, 256, (30, 60, 3), dtype=np.uint8)
        outs = {}
        for b in backends:
            batch = vlmprep.Processor(pipe, backend=b, dtype="uint8")([img])
            assert batch.num_tokens == [16] and batch.grid_thw.tolist() == [[1, 4, 4]]  # merge 1
            outs[b] = batch.pixel_values
            assert (outs[b][0, :, :10] == 128).all()  # the grey band above the 28-row image
        assert (outs["reference"].int() - outs["torch"].int()).abs().max() <= 3
        assert vlmprep.Pipeline.from_dict(pipe.to_dict()) == pipe
    finally:
        ops.OP_TYPES.clear(), ops.OP_TYPES.update(saved_ops)
        SIZING_RULES.clear(), SIZING_RULES.update(saved_rules)


# -- the boundary: expected / got / fix -----------------------------------------------------------
def test_extension_errors_say_what_to_do():
    saved_ops, saved_rules = dict(ops.OP_TYPES), dict(SIZING_RULES)
    try:
        with pytest.raises(ValueError, match="expected a class attribute name"):
            @dataclass(frozen=True)
            class nameless(ops.SizingOp):
                interpolation: str = "bilinear"
        with pytest.raises(RuntimeError, match="'resize' defined twice.*pick another name"):
            @dataclass(frozen=True)
            class resize(ops.SizingOp):
                name: ClassVar[str] = "resize"
                interpolation: str = "bilinear"

        @dataclass(frozen=True)
        class no_interp(ops.SizingOp):
            name: ClassVar[str] = "no_interp_test"
            size: int = 28
        with pytest.raises(RuntimeError, match="interpolation field"):
            plan.sizing_rule(no_interp)
        with pytest.raises(ValueError, match="interpolation field"):
            vlmprep.Pipeline([no_interp(), ops.patchify()])
        with pytest.raises(RuntimeError, match="expected a sizing op"):
            plan.sizing_rule(ops.normalize)
        with pytest.raises(RuntimeError, match="expected a sizing op"):
            plan.sizing_rule("no_such_op")

        @dataclass(frozen=True)
        class bad(ops.SizingOp):
            name: ClassVar[str] = "bad_rule_test"
            interpolation: str = "bilinear"

        answers = {
            "not a Sizing": ({"tiles": []}, TypeError, "expected a vlmprep.plan.Sizing"),
            "parent later": (plan.Sizing([plan.Canvas((28, 28), parent=1), plan.Canvas((28, 28))],
                                         [(0, 0, 28, 28)], [0]), ValueError, "earlier canvas"),
            "no index": (plan.Sizing([plan.Canvas((28, 28))], [(0, 0, 28, 28)], []), ValueError,
                         "one tile_canvas index per tile"),
            "bad canvas": (plan.Sizing([plan.Canvas((28, 28))], [(0, 0, 28, 28)], [3]), ValueError,
                           "in a canvas 0..0"),
        }
        answer: list = [None]

        @plan.sizing_rule(bad)
        def _bad(op, hw, pipeline):
            return answer[0]
        pipe = vlmprep.Pipeline([bad(), ops.patchify(patch_size=14)])
        for sz, exc, msg in answers.values():
            answer[0] = sz
            with pytest.raises(exc, match=f"sizing rule of op 'bad_rule_test'.*{msg}"):
                plan.plan_image(pipe, (28, 28))
        # tiles of the 'tiles' order must have the pipeline's tile size
        tiles = vlmprep.Pipeline([ops.resize(mode="fixed", height=28, width=28),
                                  ops.patchify(patch_size=14, order="tiles")])
        SIZING_RULES["resize"], keep = (lambda op, hw, p: plan.Sizing(
            [plan.Canvas((28, 28))], [(0, 0, 14, 28)], [0])), SIZING_RULES["resize"]
        with pytest.raises(ValueError, match=r"\(28, 28\) \(the pipeline's tile_hw\)"):
            plan.plan_image(tiles, (28, 28))
        SIZING_RULES["resize"] = keep
        # a second, different rule for an op is refused; the same function again replaces it
        with pytest.raises(RuntimeError, match="defined twice"):
            plan.sizing_rule(bad)(lambda op, hw, pipeline: None)
        plan.sizing_rule(bad)(_bad)
    finally:
        ops.OP_TYPES.clear(), ops.OP_TYPES.update(saved_ops)
        SIZING_RULES.clear(), SIZING_RULES.update(saved_rules)


def test_center_crop_only_with_a_sizing_op_that_keeps_one_canvas():
    keeps_one = sorted(n for n, c in ops.OP_TYPES.items() if getattr(c, "allows_center_crop", False))
    assert {"resize", "smart_resize"} <= set(keeps_one) and "internvl_tile" not in keeps_one
    with pytest.raises(ValueError, match=re.escape(f"center_crop only with a sizing op that keeps one "
                                                   f"canvas ({keeps_one})") + ".*'internvl_tile'"):
        vlmprep.Pipeline([ops.internvl_tile(), ops.center_crop(height=448, width=448),
                          ops.patchify(order="tiles")])
    with pytest.raises(ValueError, match="'anyres_tile'"):
        vlmprep.Pipeline([ops.anyres_tile(), ops.center_crop(), ops.patchify(order="tiles")])
    with pytest.raises(ValueError, match="after the sizing op"):
        vlmprep.Pipeline([ops.center_crop(), ops.resize(mode="shortest_edge", size=224),
                          ops.patchify(order="tiles")])
