"""The compact row form (issue 20 item 1): ``Processor(row_form="compact")``.

Oracle: the same Processor's ``row_form="full"`` output (itself checked against transformers
elsewhere). For every backend (reference, torch, torch match="torchvision", dali), every dtype
and every fused executor, on real photos and odd sizes: the geometry is the full form's
(grid_thw, seqlens, cu_seqlens, num_tokens, placeholders, num_embeddings) and
``expand_rows(compact)`` is the full ``pixel_values`` bit for bit (torch.equal); the compact rows
are the full rows' t=0 slice, 1/T of the bytes.
"""
from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch
from _support.devices import devices
from _support.imgdata import crop, encode, photo, tiled
from _support.spies import record_returns
from _support.videos import pan_zoom

import vlmprep
from vlmprep import ops, pack
from vlmprep.backends import fusion
from vlmprep.cache import OutputCache

QWEN = ("qwen2-vl", "qwen3-vl")
DTYPES = ("float32", "bfloat16", "uint8")
#: (backend, match): every executing backend the CPU has.
BACKENDS = [("reference", "pil"), ("torch", "pil"), ("torch", "torchvision"),
            pytest.param(("dali", "pil"), marks=pytest.mark.dali, id="dali-pil")]


def images() -> list:
    """Real photos in several input forms, and odd sizes (min_pixels upscale, thin strips,
    sides that are not multiples of the patch)."""
    return [encode(tiled("coffee", 301, 517), "jpeg"), tiled("astronaut", 640, 203),
            encode(tiled("chelsea", 96, 1000), "png"), photo("camera")[:213, :97].copy(),
            crop("rocket", 29, 31), encode(tiled("hopper", 447, 333), "webp")]


def make(preset, backend="torch", match="pil", dtype="float32", row_form="full", **kw):
    return vlmprep.Processor(preset, backend=backend, match=match, dtype=dtype, row_form=row_form,
                             **kw)


def assert_compact_of(c: pack.PackedBatch, f: pack.PackedBatch, what: str = "") -> None:
    """``c`` is ``f`` in the compact form: same geometry, rows the t=0 slice, expanded bit-equal."""
    assert c.row_form == "compact" and f.row_form == "full", what
    T = f.pipeline.patchify.temporal_patch_size
    assert torch.equal(c.grid_thw, f.grid_thw), what
    assert c.seqlens == f.seqlens and c.max_seqlen == f.max_seqlen, what
    assert torch.equal(c.cu_seqlens, f.cu_seqlens), what
    assert torch.equal(c.image_index, f.image_index), what
    assert c.num_tokens == f.num_tokens and c.placeholders == f.placeholders, what
    assert c.num_embeddings == f.num_embeddings, what
    assert sorted(c.errors) == sorted(f.errors), what
    assert [str(e) for e in c.errors.values()] == [str(e) for e in f.errors.values()], what
    assert c.pixel_values.dtype == f.pixel_values.dtype, what
    assert c.pixel_values.device == f.pixel_values.device, what
    n, width = f.pixel_values.shape
    assert tuple(c.pixel_values.shape) == (n, width // T), what
    assert c.pixel_values.nbytes * T == f.pixel_values.nbytes, what
    full = f.pixel_values.view(n, 3, T, -1)
    for t in range(T):  # every temporal copy of the full row is the compact row
        assert torch.equal(full[:, :, t].reshape(n, -1), c.pixel_values), f"{what} t={t}"
    assert torch.equal(pack.expand_rows(c.pixel_values, T), f.pixel_values), what
    assert torch.equal(c.full_rows(), f.pixel_values), what


# -- every backend, dtype, family -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("be", BACKENDS, ids=lambda b: "-".join(b))
@pytest.mark.parametrize("preset", QWEN)
def test_compact_is_the_full_form_once(preset, be, dtype):
    backend, match = be
    imgs = images()
    full = make(preset, backend, match, dtype)(imgs)
    compact = make(preset, backend, match, dtype, "compact")(imgs)
    assert compact.num_images == len(imgs) and not compact.errors
    assert_compact_of(compact, full, f"{preset} {backend} {match} {dtype}")


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_every_fused_executor_writes_compact_rows(kernels, monkeypatch, backend, dtype):
    """The kernels read the executing pipeline's patchify: each executor (fusion's table) writes
    the compact rows, and each really ran."""
    from vlmprep import kernels as vk
    seen = record_returns(monkeypatch, fusion, "choose")
    jpeg = encode(tiled("coffee", 301, 517), "jpeg")
    arr = tiled("astronaut", 640, 203)
    full_p, comp_p = make("qwen2-vl", backend, dtype=dtype), \
        make("qwen2-vl", backend, dtype=dtype, row_form="compact")

    def both(fn):
        seen.clear()
        f, c = fn(full_p), fn(comp_p)
        assert_compact_of(c, f, f"{backend} {dtype} {seen}")
        return sorted(set(seen))

    with monkeypatch.context() as m, fusion.at_most(fusion.OP_BY_OP):
        m.setattr(vk, "available", lambda: False)
        assert both(lambda p: p([jpeg, arr])) == [fusion.OP_BY_OP]
    with vk.local_threads(1), fusion.at_most(fusion.ROWS):
        assert both(lambda p: p([jpeg, arr])) == [fusion.ROWS]
    if backend == "torch":  # the kernel resizes while it writes (torch's resize is the kernel's)
        with vk.local_threads(1):
            assert both(lambda p: p([jpeg, arr])) == [fusion.RESIZE_ROWS]
        if vk.jpeg_available():
            vk.set_num_threads(2)
            try:
                assert both(lambda p: p([jpeg])) == [fusion.DECODE_RESIZE_ROWS]
            finally:
                vk.set_num_threads(None)


@pytest.mark.dali
@pytest.mark.parametrize("cap", [fusion.OP_BY_OP, fusion.ROWS])
def test_dali_graphs_write_compact_rows(monkeypatch, cap):
    """dali's tiles graph: the stock lowerings (OP_BY_OP) and, where it is loaded, the csrc
    plugin op (ROWS) both take the executing pipeline's temporal_patch_size."""
    seen = record_returns(monkeypatch, fusion, "choose_graph")
    imgs = images()[:3]
    with fusion.at_most(cap):  # the graphs are built inside the block
        for dtype in ("float32", "uint8"):
            full = make("qwen2-vl", "dali", dtype=dtype)(imgs)
            compact = make("qwen2-vl", "dali", dtype=dtype, row_form="compact")(imgs)
            assert_compact_of(compact, full, f"{cap} {dtype} {seen}")
    if cap == fusion.ROWS and fusion.ROWS not in seen:
        pytest.skip(f"the dali plugin is not loaded here (graphs ran {sorted(set(seen))})")
    assert set(seen) == {cap}, seen


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("backend", ["torch", pytest.param("dali", marks=pytest.mark.dali)])
def test_compact_on_each_device(backend, device):
    imgs = images()[:3]
    full = make("qwen2-vl", backend, dtype="bfloat16", device=device)(imgs)
    compact = make("qwen2-vl", backend, dtype="bfloat16", device=device, row_form="compact")(imgs)
    assert compact.pixel_values.device.type == device
    assert_compact_of(compact, full, f"{backend} {device}")


def test_a_custom_qwen_style_pipeline_with_three_copies():
    base = vlmprep.presets.get("qwen2-vl")
    pipe = vlmprep.Pipeline([op if op.name != "patchify" else
                             ops.patchify(patch_size=14, temporal_patch_size=3, merge_size=2)
                             for op in base.ops], name="tri")
    for backend in ("reference", "torch"):
        full = vlmprep.Processor(pipe, backend=backend)(images()[:2])
        compact = vlmprep.Processor(pipe, backend=backend, row_form="compact")(images()[:2])
        assert full.pixel_values.shape[1] == 3 * 588 and compact.pixel_values.shape[1] == 588
        assert_compact_of(compact, full, backend)


def test_compact_bytes_are_one_t_th():
    """1080p qwen2-vl (checkpoint config): float32 full 50.6 MB, uint8 compact 6.3 MB (1/8)."""
    img = tiled("astronaut", 1080, 1920)
    got = {(dt, f): make("qwen2-vl", dtype=dt, row_form=f)([img]).pixel_values.nbytes
           for dt in ("float32", "uint8") for f in ("full", "compact")}
    assert got[("float32", "full")] == 10764 * 1176 * 4 == 50_633_856
    assert got[("float32", "compact")] * 2 == got[("float32", "full")]
    assert got[("uint8", "compact")] == 10764 * 588 == 6_329_232
    assert got[("uint8", "compact")] * 8 == got[("float32", "full")]


# -- errors, videos, to_hf -------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS, ids=lambda b: "-".join(b))
def test_skipped_items_keep_the_geometry(be):
    backend, match = be
    jpeg = encode(tiled("coffee", 301, 517), "jpeg")
    truncated = jpeg[:len(jpeg) // 3]  # the header plans; the decode fails late
    items = [tiled("astronaut", 640, 203), b"not an image", jpeg, truncated, crop("rocket", 29, 31)]
    for dtype in DTYPES:
        full = make("qwen3-vl", backend, match, dtype, errors="skip")(items)
        compact = make("qwen3-vl", backend, match, dtype, "compact", errors="skip")(items)
        assert sorted(compact.errors) == [1, 3], compact.errors
        assert_compact_of(compact, full, f"{backend} {match} {dtype}")
        with pytest.raises(vlmprep.ImageError):
            make("qwen3-vl", backend, match, dtype, "compact")(items)


@pytest.mark.parametrize("preset", QWEN)
def test_videos_stay_full(preset):
    clip = pan_zoom("astronaut", 8, (160, 120))
    imgs = images()[:2]
    full = make(preset)(imgs, videos=[clip])
    compact = make(preset, row_form="compact")(imgs, videos=[clip])
    assert_compact_of(compact, full, preset)
    assert compact.videos is not None and full.videos is not None
    assert compact.videos.row_form == "full"
    assert torch.equal(compact.videos.pixel_values, full.videos.pixel_values)
    assert torch.equal(compact.videos.grid_thw, full.videos.grid_thw)
    assert compact.videos.full_rows() is compact.videos.pixel_values
    # videos only: the images' batch is empty and compact, the videos full
    only = make(preset, row_form="compact")(videos=[clip])
    assert only.row_form == "compact" and only.num_images == 0 and only.videos.row_form == "full"


@pytest.mark.parametrize("preset", QWEN)
def test_to_hf_gives_the_full_rows(preset):
    imgs = images()[:3]
    clip = pan_zoom("chelsea", 6, (160, 120))
    for dtype in ("float32", "uint8"):
        full = make(preset, dtype=dtype, errors="skip")(imgs + [b"junk"], videos=[clip])
        compact = make(preset, dtype=dtype, errors="skip", row_form="compact")(imgs + [b"junk"],
                                                                               videos=[clip])
        a, b = full.to_hf(), compact.to_hf()
        assert sorted(a) == sorted(b) and "pixel_values_videos" in b
        for k in a:
            assert torch.equal(a[k], b[k]), k
        np_a, np_b = full.to_hf(return_tensors="np"), compact.to_hf(return_tensors="np")
        assert all(np.array_equal(np_a[k], np_b[k]) for k in np_a)
        on = compact.to_hf(device="cpu")  # the consumer's device: here the same one
        assert sorted(on) == sorted(a) and all(torch.equal(a[k], on[k]) for k in a)
    # the collate helper is to_hf's: full rows too
    from vlmprep.loader import collate_hf
    assert torch.equal(collate_hf(compact)["pixel_values"], full.pixel_values)


# -- the batch API keeps the form ------------------------------------------------------------------
def test_split_to_concat_keep_the_form_and_mixed_forms_are_refused():
    imgs = images()[:3]
    full = make("qwen2-vl")(imgs)
    compact = make("qwen2-vl", row_form="compact")(imgs)
    parts = list(compact.split())
    assert [p.row_form for p in parts] == ["compact"] * 3
    for p, q in zip(parts, full.split()):
        assert_compact_of(p, q)
    joined = pack.concat(parts)
    assert_compact_of(joined, full)
    assert compact.to("cpu").row_form == "compact"
    assert "row_form='compact'" in repr(compact) and "row_form" not in repr(full)
    with pytest.raises(ValueError, match=r"one row_form, got \['compact', 'full'\]"):
        pack.concat([parts[0], next(full.split())])
    # full_rows of a full batch is its pixel_values; device= moves either form
    assert full.full_rows() is full.pixel_values
    assert torch.equal(compact.full_rows(device="cpu"), full.pixel_values)
    with pytest.raises(ValueError, match="row_form expected one of"):
        replace(full, row_form="half")
    with pytest.raises(ValueError, match="pipeline=None"):
        replace(compact, pipeline=None).full_rows()


@pytest.mark.gpu
def test_pin_memory_and_full_rows_on_the_gpu_keep_the_form():
    compact = make("qwen2-vl", dtype="uint8", row_form="compact")(images()[:2])
    full = make("qwen2-vl", dtype="uint8")(images()[:2])
    pinned = compact.pin_memory()
    assert pinned.row_form == "compact" and pinned.is_pinned
    on = compact.full_rows(device="cuda")
    assert on.device.type == "cuda" and torch.equal(on.cpu(), full.pixel_values)
    assert compact.to("cuda").row_form == "compact"
    hf = compact.to_hf(device="cuda")  # expanded on the GPU, grid on the host as without device
    assert hf["pixel_values"].device.type == "cuda" and hf["image_grid_thw"].device.type == "cpu"
    assert torch.equal(hf["pixel_values"].cpu(), full.pixel_values)


def test_expand_rows_checks_its_input():
    rows = torch.arange(2 * 12, dtype=torch.float32).reshape(2, 12)  # C=3, P*P=4
    out = pack.expand_rows(rows, 2)
    assert out.shape == (2, 24)
    assert torch.equal(out.view(2, 3, 2, 4)[:, :, 1], rows.view(2, 3, 4))
    assert pack.expand_rows(rows, 1) is rows
    assert pack.expand_rows(rows[:0], 2).shape == (0, 24)
    assert pack.expand_rows(rows, 3, channels=1).shape == (2, 36)
    with pytest.raises(ValueError, match="2-d tensor"):
        pack.expand_rows(rows[0], 2)
    with pytest.raises(ValueError, match="temporal_patch_size expected an int >= 1"):
        pack.expand_rows(rows, 0)
    with pytest.raises(ValueError, match="multiple of channels=5"):
        pack.expand_rows(rows, 2, channels=5)


# -- the Processor option ---------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["llava-1.5", "internvl", "pixtral", "siglip2-naflex"])
def test_pipelines_whose_rows_do_not_repeat_refuse_compact(preset):
    with pytest.raises(ValueError, match=r"row_form='compact': expected a pipeline whose image rows "
                                         r"repeat over time .* got '" + preset + r"' with .*; use "
                                         r"row_form='full'"):
        vlmprep.Processor(preset, row_form="compact")
    assert vlmprep.Processor(preset).row_form == "full"


def test_the_option_is_checked_kept_and_shown():
    one = vlmprep.presets.get("qwen2-vl").replace(temporal_patch_size=1)
    with pytest.raises(ValueError, match="temporal_patch_size 1: its rows are already one copy"):
        vlmprep.Processor(one, row_form="compact")
    with pytest.raises(ValueError, match=r"row_form: expected one of \('full', 'compact'\), "
                                         r"got 'half'"):
        vlmprep.Processor("qwen2-vl", row_form="half")
    proc = vlmprep.Processor("qwen2-vl", dtype="uint8", row_form="compact", max_pixels=1_003_520)
    assert proc.row_form == "compact" and proc.pipeline.patchify.temporal_patch_size == 2
    assert "row_form='compact'" in repr(proc) and "row_form" not in repr(proc.clone(
        row_form="full"))
    c = proc.clone(errors="skip")
    assert c.row_form == "compact" and c.errors == "skip"
    with pytest.raises(ValueError, match="row_form='compact'"):
        proc.clone(pipeline="llava-1.5")
    plan = proc.plan(images()[:2])  # a plan says nothing of the row form
    assert plan == vlmprep.Processor("qwen2-vl", max_pixels=1_003_520).plan(images()[:2])
    import pickle
    assert pickle.loads(pickle.dumps(proc)).row_form == "compact"


def test_from_pretrained_passes_row_form(tmp_path):
    from vlmprep.bench import hf as bench_hf
    cfg = bench_hf.checkpoint_config("qwen3-vl")
    import json
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(cfg))
    proc = vlmprep.Processor.from_pretrained(tmp_path, row_form="compact", backend="reference")
    assert proc.row_form == "compact"
    img = images()[:1]
    assert_compact_of(proc(img), vlmprep.Processor.from_pretrained(tmp_path, backend="reference")(img))


# -- cache, loader, serving --------------------------------------------------------------------------
def test_cache_hits_never_cross_forms():
    img = encode(tiled("coffee", 301, 517), "jpeg")
    full, compact = make("qwen2-vl", dtype="uint8"), make("qwen2-vl", dtype="uint8",
                                                          row_form="compact")
    cache = OutputCache(max_bytes=64 << 20)
    kf, kc = cache.key_for(img, full), cache.key_for(img, compact)
    assert kf and kc and kf != kc
    cache.put(kf, full([img]))
    assert cache.get(kc) is None
    cache.put(kc, compact([img]))
    hit = cache.get(kc)
    assert hit is not None and hit.row_form == "compact"
    assert_compact_of(hit, cache.get(kf))


@pytest.mark.parametrize("nw", [0, 2])
def test_the_loader_keeps_a_compact_processor(seed, nw):
    from vlmprep.loader import DataLoader
    rng = np.random.default_rng(seed)
    imgs = [tiled(n, int(rng.integers(20, 300)), int(rng.integers(20, 300)))
            for n in ("coffee", "chelsea", "astronaut", "hopper")]
    sources = [imgs[0], b"junk", imgs[1], imgs[0], imgs[2], imgs[3], b"junk"]
    for cache in (None, OutputCache(max_bytes=64 << 20)):
        proc = make("qwen2-vl", dtype="uint8", errors="skip", row_form="compact")
        full = make("qwen2-vl", dtype="uint8", errors="skip")
        got = list(DataLoader(sources, proc, batch_size=4, max_batch_tokens=None, cache=cache,
                              num_workers=nw))
        want = list(DataLoader(sources, full, batch_size=4, max_batch_tokens=None, num_workers=0))
        assert len(got) == 2 and [sorted(b.errors) for _, b in got] == [[1], [2]]
        for (ids, c), (ids_f, f) in zip(got, want):
            assert ids == ids_f
            assert_compact_of(c, f)
            assert_compact_of(c, replace(full(sources[ids[0]:ids[-1] + 1]), errors=f.errors))


def test_the_batcher_keeps_a_compact_processor():
    from vlmprep.serve import Batcher
    proc = make("qwen2-vl", dtype="uint8", row_form="compact")
    full = make("qwen2-vl", dtype="uint8")
    imgs = images()
    reqs = [imgs[:2], imgs[2:3], [imgs[3], b"junk"], imgs[4:]]

    async def main():
        async with Batcher(proc, max_delay_ms=20, cache=OutputCache(max_bytes=64 << 20)) as b:
            first = await asyncio.gather(*(b.submit(r) for r in reqs), return_exceptions=True)
            again = await b.submit(reqs[0])  # cache hits
        return first, again

    first, again = asyncio.run(main())
    assert isinstance(first[2], vlmprep.ImageError)  # proc raises: the request gets its error
    for r, got in zip(reqs[:2] + reqs[3:], first[:2] + first[3:]):
        assert_compact_of(got, full(r))
    assert_compact_of(again, full(reqs[0]))
