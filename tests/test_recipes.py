"""The recipes of docs/architecture.md ("Where each kind of change goes"), each run end to end.

Every test adds a toy one through the public extension points only, runs a Processor on real
pixels, and takes every registration back afterwards (``registries``):

1. A new op: ``toy_invert`` (a frozen ``vlmprep.ops.Op`` dataclass, checked in ``__post_init__``
   with ``ops.fail``), one ``@registry.lowering(backend, "toy_invert")`` per backend (reference,
   torch, dali where it is usable), put in preset pipelines; pixels against numpy and between
   backends; a backend without a lowering refuses when the Processor is made.
2. A new backend: ``toy``, a ``Backend`` class deriving from the reference one, registered with
   ``registry.register`` and lowerings delegating to reference's (``register_video`` for its
   videos); bit-equal to ``backend="reference"``; it executes the plan it is given.
3. Video for a family: ``toy-vl`` with a ``@video_rule``, a ``VideoSpec`` in its ``FamilySpec``
   (``presets.register``) and an ``@hf_video_form``, run on a lossless clip written with
   ``cv2.VideoWriter``; shapes, grid and tokens are the rule's, pixels are transformers' video
   processor arithmetic computed here independently.

"A new model family" is tests/test_family_recipe.py.
"""
from __future__ import annotations

import io
import sys
import types
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
from _support.imgdata import crop, encode
from _support.videos import pan_zoom, write_cv2
from PIL import Image

import vlmprep
from vlmprep import hf_forms, ops, plan, presets
from vlmprep.backends import fusion, registry
from vlmprep.backends.video import register_video
from vlmprep.plan import video as pv
from vlmprep.presets import FamilySpec, FormSpec, VideoSpec

torch = pytest.importorskip("torch")

DALI = registry.why_unavailable("dali") is None
#: The backends that run on the CPU here, each with a toy_invert lowering below.
BACKENDS = ["reference", "torch"] + (["dali"] if DALI else [])


@pytest.fixture()
def registries(monkeypatch):
    """Every registry a recipe adds to, restored afterwards. There is no public unregister: a
    registration is meant to last the process, so the test takes it back from the dicts.
    Backends register their lowerings when first imported: import them all before the snapshot,
    so that restoring it cannot drop a real backend's lowerings."""
    for name in registry.available():
        registry.get(name)
    registry.get("torch", "torchvision")
    saved = [(d, dict(d)) for d in (ops.OP_TYPES, plan.SIZING_RULES, pv.VIDEO_RULES,
                                    hf_forms.HF_FORMS, hf_forms.VIDEO_HF_FORMS,
                                    registry._BACKENDS, registry._LOWERINGS)]
    monkeypatch.setattr(hf_forms, "HF_OUTPUTS", hf_forms.HF_OUTPUTS)
    monkeypatch.setattr(presets, "FAMILIES", presets.FAMILIES)
    try:
        yield
    finally:
        for reg, before in saved:
            reg.clear()
            reg.update(before)  # type: ignore[attr-defined]


def _images() -> list[bytes]:
    """Two real photos of different shapes, encoded (the Processor decodes them)."""
    return [encode(crop("astronaut", 150, 200, 40, 120), "png"),
            encode(crop("chelsea", 180, 120, 30, 200), "jpeg")]


def _decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _by_channel(rows: Any) -> np.ndarray:
    """Output rows -> ``(N, 3, -1)``: every layout keeps the channel outermost in a row
    (``[c, t, py, px]``, ``[c, py, px]``) or a tile (``(C, H, W)``)."""
    return rows.numpy().reshape(rows.shape[0], 3, -1)


# -- 1. a new op --------------------------------------------------------------------------------
def _define_toy_invert() -> type:
    """The op class (defined inside the ``toy_op`` fixture: a class registers itself in
    ``ops.OP_TYPES`` when it is made, and the fixture takes it back)."""

    @dataclass(frozen=True)
    class toy_invert(ops.Op):
        """Inverts the uint8 levels (``255 - v``) of some channels of every tile, after the
        sizing op and before normalize. No shape changes, so no plan rule."""

        name: ClassVar[str] = "toy_invert"
        channels: tuple[int, ...] = (0, 1, 2)

        def __post_init__(self) -> None:
            ch = self.channels
            if not (isinstance(ch, (tuple, list)) and ch and len(set(ch)) == len(ch)
                    and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 2
                            for c in ch)):
                ops.fail(self.name, "channels", "distinct channel indices in 0..2 (R, G, B)", ch,
                         "pass channels=(0, 1, 2) or a part of it")
            object.__setattr__(self, "channels", tuple(ch))

    return toy_invert


def _invert_reference(op: Any, tiles: list[np.ndarray], ctx: Any) -> list[np.ndarray]:
    """reference: uint8 ``(h, w, 3)`` numpy tiles (maybe read-only views: never written)."""
    out = []
    for t in tiles:
        x = t.copy()
        x[..., list(op.channels)] = 255 - t[..., list(op.channels)]
        out.append(x)
    return out


def _invert_torch(op: Any, tiles: list[Any], ctx: Any) -> list[Any]:
    """torch: uint8 ``(3, h, w)`` tensors on ``ctx.device``."""
    out = []
    for t in tiles:
        x = t.clone()
        x[list(op.channels)] = 255 - t[list(op.channels)]
        out.append(x)
    return out


def _invert_dali(op: Any, x: Any, g: Any) -> Any:
    """dali: called once while the tiles graph is built; ``x`` is the uint8 ``(h, w, 3)`` tile
    node on ``g.device``."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as dt
    mask = np.zeros(3, np.int16)
    mask[list(op.channels)] = 1
    x16 = fn.cast(x, dtype=dt.INT16)
    m = dt.Constant(mask, device=g.device)
    return fn.cast(x16 + m * (dt.Constant(np.int16(255), device=g.device) - x16 - x16),
                   dtype=dt.UINT8)


@pytest.fixture()
def toy_op(registries) -> type:
    """toy_invert and one lowering of it per backend that runs here."""
    toy_invert = _define_toy_invert()
    registry.lowering("reference", "toy_invert")(_invert_reference)
    registry.lowering("torch", "toy_invert")(_invert_torch)
    if DALI:
        registry.lowering("dali", "toy_invert")(_invert_dali)
    return toy_invert


def _with(pipe: vlmprep.Pipeline, op: ops.Op, before: str = "normalize") -> vlmprep.Pipeline:
    """``pipe`` with ``op`` put just before its op ``before``."""
    seq = list(pipe.ops)
    k = [o.name for o in seq].index(before)
    return vlmprep.Pipeline(seq[:k] + [op] + seq[k:], name=pipe.name + "+" + op.name)


def test_a_new_op_validates_its_fields(toy_op):
    toy_invert = toy_op
    assert toy_invert(channels=[2, 0]).channels == (2, 0)
    for bad in ((), (0, 0), (3,), ("r",), (True,)):
        with pytest.raises(ValueError, match=r"^ops\.toy_invert: channels: expected distinct channel "
                                             r"indices in 0\.\.2 \(R, G, B\), got .*; pass channels="):
            toy_invert(channels=bad)
    assert ops.OP_TYPES["toy_invert"] is toy_invert  # defined = registered (Pipeline.from_dict)
    pipe = _with(presets.get("siglip"), toy_invert(channels=(1,)))
    assert vlmprep.Pipeline.from_dict(pipe.to_dict()) == pipe


def test_a_new_op_runs_on_every_backend(toy_op):
    images = _images()
    op = toy_op(channels=(0, 2))
    pipes = [presets.get("siglip", height=112, width=140),            # tiles
             presets.get("qwen2-vl", max_pixels=160 * 160)]          # merge-grouped rows
    for base in pipes:
        pipe = _with(base, op)
        assert [o.name for o in pipe.ops][2] == "toy_invert"
        got = {}
        for b in BACKENDS:
            toy = vlmprep.Processor(pipe, backend=b, dtype="uint8")(images)
            plain = vlmprep.Processor(base, backend=b, dtype="uint8")(images)
            # the plan does not change (no rule: the op keeps every shape)
            assert toy.num_tokens == plain.num_tokens and torch.equal(toy.grid_thw, plain.grid_thw)
            t, p = _by_channel(toy.pixel_values), _by_channel(plain.pixel_values)
            assert (t[:, [0, 2]] == 255 - p[:, [0, 2]]).all() and (t[:, 1] == p[:, 1]).all(), b
            got[b] = toy.pixel_values.int()
        # the compiled resize is Pillow's (else torch's own: within 2 levels); dali: 3 levels
        assert (got["torch"] - got["reference"]).abs().max() <= (0 if vlmprep.kernels.available() else 3)
        if DALI:
            assert (got["dali"] - got["reference"]).abs().max() <= 3

    # independent: Pillow's resize (transformers' PIL backend), the inversion, the normalize
    pipe = _with(pipes[0], op)
    norm = pipe.normalize
    levels = vlmprep.Processor(pipe, backend="reference", dtype="uint8")(images).pixel_values
    floats = vlmprep.Processor(pipe, backend="reference")(images).pixel_values
    for k, data in enumerate(images):
        x = np.asarray(Image.fromarray(_decoded(data)).resize((140, 112), Image.BICUBIC)).copy()
        x[..., [0, 2]] = 255 - x[..., [0, 2]]
        np.testing.assert_array_equal(levels[k].numpy(), x.transpose(2, 0, 1))
        want = ((x.astype(np.float64) * norm.rescale).astype(np.float32)
                - np.float32(norm.mean)) / np.float32(norm.std)
        np.testing.assert_array_equal(floats[k].numpy(), want.transpose(2, 0, 1))


def test_a_backend_without_the_lowering_refuses(toy_op):
    pipe = _with(presets.get("siglip"), toy_op())
    # match="torchvision" runs the lowerings registered under "torch:torchvision" (none here)
    with pytest.raises(NotImplementedError, match=r"backend 'torch' with match='torchvision' has no "
                                                  r"lowering for op 'toy_invert'; backends that have "
                                                  r"it: .*'reference', 'torch'; .*\(and match=\.\.\.\)"):
        vlmprep.Processor(pipe, backend="torch", match="torchvision")


def test_an_op_after_normalize_runs_on_every_executor(registries):
    """A fused executor (the rows kernel, which normalizes and patchifies in one call) must not
    skip or reorder an op between normalize and patchify: such a pipeline runs op by op."""

    @dataclass(frozen=True)
    class toy_scale(ops.Op):
        """Multiplies the normalized (float) tiles by ``factor``."""

        name: ClassVar[str] = "toy_scale"
        factor: float = 2.0

    registry.lowering("reference", "toy_scale")(
        lambda op, tiles, ctx: [t * np.float32(op.factor) for t in tiles])
    registry.lowering("torch", "toy_scale")(lambda op, tiles, ctx: [t * op.factor for t in tiles])
    if DALI:
        registry.lowering("dali", "toy_scale")(lambda op, x, g: x * float(op.factor))
    base = presets.get("siglip", height=56, width=70)
    pipe = _with(base, toy_scale(), before="patchify")
    images = _images()
    for b in BACKENDS:
        plain = vlmprep.Processor(base, backend=b)(images).pixel_values
        for cap in (fusion.DECODE_RESIZE_ROWS, fusion.OP_BY_OP):
            with fusion.at_most(cap):
                got = vlmprep.Processor(pipe, backend=b)(images).pixel_values
            assert torch.equal(got, plain * 2), (b, cap)


# -- 2. a new backend ---------------------------------------------------------------------------
#: What the toy backend's lowerings were called with: (op key, the image's plan, its dest shape).
CALLS: list[tuple[str, Any, tuple[int, ...]]] = []


def _delegate(key: str):
    """The toy lowering of ``key``: records its call, then runs reference's."""
    def low(op: Any, value: Any, ctx: Any) -> Any:
        CALLS.append((key, ctx.plan, tuple(ctx.dest.shape)))
        return registry.get_lowering("reference", key)(op, value, ctx)
    return low


@pytest.fixture()
def toy_backend(registries, monkeypatch):
    """Backend ``toy``: a module defining ``Backend`` (registered by its import path, imported on
    first use), an availability check, one lowering per op, and the shared video lowering."""
    from vlmprep.backends.reference import Backend as Reference

    mod = types.ModuleType("toy_backend")

    class Backend(Reference):
        name = "toy"  # the registry key of its lowerings

    mod.Backend = Backend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    registry.register("toy", mod.__name__, lambda: None)
    # one lowering per op: decode, every sizing op (SIZING) and center_crop, normalize, patchify
    for key in ("decode", registry.SIZING, "center_crop", "normalize", "patchify"):
        registry.lowering("toy", key)(_delegate(key))
    register_video("toy")
    # a second backend whose check says it cannot run here
    registry.register("toy_gpu", mod.__name__, lambda: "needs the toy accelerator (none here)")
    CALLS.clear()
    yield Backend
    CALLS.clear()


def test_a_new_backend_runs_the_plan(toy_backend):
    assert "toy" in vlmprep.backends.names() and "toy" in vlmprep.backends.available()
    assert "toy_gpu" not in vlmprep.backends.available()
    assert vlmprep.backends.why_unavailable("toy_gpu") == "needs the toy accelerator (none here)"
    with pytest.raises(RuntimeError, match="backend 'toy_gpu' is not usable here: needs the toy "
                                           "accelerator"):
        vlmprep.Processor("siglip", backend="toy_gpu")
    assert vlmprep.backends.get("toy") is toy_backend

    images = _images()
    for preset, kw in (("qwen2-vl", {"max_pixels": 200 * 200}), ("internvl", {"max_tiles": 4}),
                       ("llava-1.5", {})):
        toy = vlmprep.Processor(preset, backend="toy", **kw)
        ref = vlmprep.Processor(preset, backend="reference", **kw)
        assert toy.backend_name == "toy"
        plans = ref.plan(images).images
        for cap in (fusion.DECODE_RESIZE_ROWS, fusion.OP_BY_OP):
            CALLS.clear()
            with fusion.at_most(cap):
                got, want = toy(images), ref(images)
            assert torch.equal(got.pixel_values, want.pixel_values), (preset, cap)
            assert torch.equal(got.grid_thw, want.grid_thw) and got.num_tokens == want.num_tokens
            # it executed the plan it was given: every lowering saw the image's plan and its
            # slice of the output, sized by the plan (the backend decides no shape)
            order = toy.pipeline.patchify.order
            seen = {(k, p.index): (p, shape) for k, p, shape in CALLS}
            need = {"decode", registry.SIZING} | ({"center_crop"} if preset == "llava-1.5" else set())
            if cap == fusion.OP_BY_OP:
                need |= {"normalize", "patchify"}  # else the rows kernel may stand in for them
            assert need <= {k for k, _, _ in CALLS}
            for p in plans:
                got_plan, shape = seen[(registry.SIZING, p.index)]
                assert got_plan == p and shape[0] == p.rows(order)

    # videos: the shared video lowering it registered, the reference's pixels
    clip = vlmprep.Video(pan_zoom("coffee", 6, (64, 48)), source_fps=6.0)
    got = vlmprep.Processor("qwen2-vl", backend="toy")(videos=[clip]).videos
    want = vlmprep.Processor("qwen2-vl", backend="reference")(videos=[clip]).videos
    assert torch.equal(got.pixel_values, want.pixel_values) and got.num_tokens == want.num_tokens


def test_the_toys_are_gone_after_their_tests():
    assert "toy" not in vlmprep.backends.names() and "toy_gpu" not in vlmprep.backends.names()
    assert not any(b == "toy" or o in ("toy_invert", "toy_scale") for b, o in registry._LOWERINGS)
    assert "toy_invert" not in ops.OP_TYPES and "toy_scale" not in ops.OP_TYPES
    assert "toy-vl" not in presets.names() and "toy-vl" not in pv.VIDEO_RULES
    assert "toy_vl" not in hf_forms.HF_FORMS and "toy_vl" not in hf_forms.VIDEO_HF_FORMS


# -- 3. video for a family ----------------------------------------------------------------------
VIDEO_TOKEN, PAD = "<toy_video>", "<toy_pad>"


def _toy_video_family() -> types.ModuleType:
    """``toy-vl``: a fixed 56x84 resize and Qwen's merge-grouped rows with frames paired in time;
    its videos sample ``num_frames`` frames uniformly."""

    # its video rule (plan/<family>.py in vlmprep): metadata -> frames, size, grid, tokens
    @pv.video_rule("toy-vl")
    def _toy_video(pipeline, meta, opts, clip, index):
        pf = pipeline.patchify
        p, m, tps = pf.patch_size, pf.merge_size, pf.temporal_patch_size
        n = min(opts.num_frames or clip.count, clip.count)
        pv.check_budget(n, meta, clip.limits)
        idx = [clip.first + i for i in pv.uniform_indices(clip.count, n)]
        idx += [idx[-1]] * (-n % tps)  # the last frame repeated to fill the last temporal patch
        (rh, rw), gt = pipeline.tile_hw, len(idx) // tps
        grid = (gt, rh // p, rw // p)
        pv.check_budget(n, meta, clip.limits, gt * grid[1] * grid[2], 3 * tps * p * p)
        tokens = gt * grid[1] * grid[2] // (m * m)
        return pv.VideoPlan(index=index, meta=meta, frame_indices=idx,
                            timestamps=[i / clip.fps for i in idx] if clip.fps else [],
                            resized_hw=(rh, rw), grid_thw=[grid], num_patches=gt * grid[1] * grid[2],
                            num_tokens=tokens, num_embeddings=tokens, placeholder=PAD * tokens)

    # its transformers outputs (hf_forms.py in vlmprep): images, then videos
    @hf_forms.hf_form("toy_vl")
    def _toy_form(b):
        return {"pixel_values": b.pixel_values, "image_grid_thw": b.grid_thw}

    @hf_forms.hf_video_form("toy_vl")
    def _toy_video_form(b):
        return {"pixel_values_videos": b.pixel_values, "video_grid_thw": b.grid_thw}

    # its family module (presets/<family>.py in vlmprep), ending with the one declaration
    def toy_vl() -> vlmprep.Pipeline:
        return vlmprep.Pipeline(
            [ops.decode(), ops.resize(height=56, width=84, interpolation="bicubic"), ops.normalize(),
             ops.patchify(patch_size=14, temporal_patch_size=2, merge_size=2),
             ops.pack(image_token=PAD, hf_output="toy_vl")], name="toy-vl")

    mod = types.ModuleType("toy_vl_family")
    mod.FAMILY = FamilySpec(  # type: ignore[attr-defined]
        name="toy_vl", presets={"toy-vl": toy_vl},
        forms=(FormSpec("toy_vl", prompt_image_token="<toy_image>", prompt_video_token=VIDEO_TOKEN,
                        vllm_embeds="flat", vllm_no_video_embeds="toy: no video embeddings",
                        sglang_not_passed="toy: no SGLang model"),),
        videos={"toy-vl": VideoSpec(lambda: pv.VideoOptions(num_frames=5, do_sample_frames=True,
                                                            family="toy-vl"), "toy-vl")})
    presets.register(mod)
    return mod


def _transformers_rows(frames: np.ndarray, hw: tuple[int, int], norm: ops.normalize,
                       p: int, m: int, tps: int) -> Any:
    """What ``Qwen2VLVideoProcessor`` computes (transformers 5.24, torchvision only): an
    antialiased uint8 ``resize`` per frame, ``normalize(x.float(), mean / rescale, std /
    rescale)``, then its ``patchify`` (view + permute), written out here."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as tvF
    x = torch.stack([tvF.resize(torch.from_numpy(f).permute(2, 0, 1).contiguous(), list(hw),
                                interpolation=InterpolationMode.BICUBIC, antialias=True)
                     for f in frames])                                     # (T, C, h, w) uint8
    x = tvF.normalize(x.float(), (torch.tensor(norm.mean) * (1 / norm.rescale)).tolist(),
                      (torch.tensor(norm.std) * (1 / norm.rescale)).tolist())
    t, c, h, w = x.shape
    gt, gh, gw = t // tps, h // p, w // p
    x = x.view(gt, tps, c, gh // m, m, p, gw // m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gt * gh * gw, c * tps * p * p)


@pytest.fixture(scope="module")
def lossless_clip(tmp_path_factory) -> tuple[str, np.ndarray]:
    """A 12-frame 160x120 FFV1 (lossless) .mkv written with cv2.VideoWriter, and its frames."""
    frames = pan_zoom("chelsea", 12, (160, 120))
    path = tmp_path_factory.mktemp("recipes") / "clip.mkv"
    why = write_cv2(path, frames, 10.0, "FFV1")
    if why:
        pytest.skip(why)
    return str(path), frames


def test_video_for_a_family(registries, lossless_clip):
    from vlmprep.adapters import transformers as hf_adapter
    path, frames = lossless_clip
    _toy_video_family()
    assert presets.video_defaults("toy-vl").num_frames == 5
    assert presets.video_pipeline("toy-vl") == presets.get("toy-vl")
    assert hf_adapter.PROMPT_VIDEO_TOKENS["toy_vl"] == VIDEO_TOKEN

    pipe = presets.get("toy-vl")
    pf = pipe.patchify
    planned = vlmprep.Processor("toy-vl").plan(videos=[path]).videos[0]
    assert planned.error is None
    assert planned.frame_indices == [0, 2, 4, 7, 9, 9]  # 5 of 12, the last repeated for t=2
    assert planned.grid_thw == [(3, 4, 6)] and planned.num_patches == 72
    assert planned.num_tokens == 18 and planned.placeholder == PAD * 18
    want = _transformers_rows(frames[planned.frame_indices], (56, 84), pipe.normalize,
                              pf.patch_size, pf.merge_size, pf.temporal_patch_size)
    for b in ("reference", "torch"):  # the backends that register_video
        proc = vlmprep.Processor("toy-vl", backend=b)
        assert proc.video_options == presets.video_defaults("toy-vl")  # the declared defaults
        v = proc(videos=[path]).videos
        assert v.video_plans[0].frame_indices == planned.frame_indices
        assert tuple(v.pixel_values.shape) == (72, 3 * 2 * 14 * 14)
        assert v.grid_thw.tolist() == [[3, 4, 6]] and v.num_tokens == [18]
        assert v.placeholders == [PAD * 18]
        assert torch.equal(v.pixel_values, want), b
        hf = v.to_hf()
        assert set(hf) == {"pixel_values_videos", "video_grid_thw"}
        assert torch.equal(hf["pixel_values_videos"], want)
    if DALI:  # dali runs images only: videos are refused, naming the backends that run them
        with pytest.raises(ValueError, match=r"videos on backend 'dali': expected a backend that "
                                             r"runs videos, one of \[.*'torch'.*\]"):
            vlmprep.Processor("toy-vl", backend="dali")(videos=[path])


def test_videos_refuse_an_op_the_video_path_would_skip(toy_op, lossless_clip):
    """The video path runs decode, sizing, normalize, patchify, pack: a pipeline with any other op
    (here the toy one) is refused for videos, naming it, rather than run without it."""
    pipe = _with(vlmprep.presets.get("qwen2-vl"), toy_op(channels=(0,)))
    proc = vlmprep.Processor(pipe, backend="reference",
                             video_options=vlmprep.presets.video_defaults("qwen2-vl"))
    assert proc(images=_images()[:1]).num_seqs == 1  # images run the op
    with pytest.raises(ValueError, match=r"expected only the ops the video path runs .* got also "
                                         r"\['toy_invert'\], which videos would skip"):
        proc(videos=[lossless_clip[0]])
    plain = vlmprep.Processor("qwen2-vl", backend="reference")
    assert plain(videos=[lossless_clip[0]]).videos.num_seqs == 1
