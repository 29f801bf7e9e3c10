"""Idefics3 / SmolVLM (``idefics3``): geometry, prompt strings, pixels and to_hf against
transformers' own processors, built from the public checkpoints' configs.

Oracles: transformers' Idefics3 / SmolVLM PIL image processors (their resize arithmetic, split
and ``get_number_of_image_patches`` run on shape-only stand-ins for the sweeps), the
``Idefics3Processor`` methods that write the prompt string and count tokens, and the PEERS.md
2.8 tables. Pixel bounds as tests/backends/test_parity_hf.py: reference identical (same PIL
calls in the same chain), torch max 3 / mean 0.5 levels (torchvision's uint8 LANCZOS kernel
is a port of Pillow's with another coefficient precision; measured here: max 2, mean ~0.01).
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep.plan import plan_image

PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]
FAKE, GLOBAL = "<fake_token_around_image>", "<global-img>"


def _proc(name="idefics3", **kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / f"{name}.json"), **kw)


def _rows_cols(p):
    """(rows, cols) of a plan: split tiles form a rows x cols grid; a lone tile is (0, 0)."""
    if len(p.tiles) == 1:
        return 0, 0
    t = p.tiles[0][2]
    return p.resized_hw[0] // t, p.resized_hw[1] // t


# -- geometry: PEERS.md 2.8 tables -------------------------------------------------------------
# Idefics3-8B (1820 / 364 / 169): H x W -> resize 1, resize 2, (rows, cols), images, tokens.
IDEFICS3_TABLE = {
    (1, 1): ((1820, 1820), (1820, 1820), (5, 5), 26, 4452),
    (17, 900): ((34, 1820), (364, 1820), (1, 5), 6, 1028),
    (900, 17): ((1820, 34), (1820, 364), (5, 1), 6, 1032),
    (333, 777): ((780, 1820), (1092, 1820), (3, 5), 16, 2740),
    (1080, 1920): ((1024, 1820), (1092, 1820), (3, 5), 16, 2740),
    (3000, 4000): ((1366, 1820), (1456, 1820), (4, 5), 21, 3596),
}
# SmolVLM-256M/500M (2048 / 512): H x W -> (rows, cols), images.
SMOLVLM_TABLE = {(1, 1): ((4, 4), 17), (17, 900): ((1, 4), 5), (333, 777): ((2, 4), 9),
                 (1080, 1920): ((3, 4), 13), (3000, 4000): ((3, 4), 13)}


@pytest.mark.parametrize("hw,want", IDEFICS3_TABLE.items())
def test_idefics3_table(hw, want):
    r1, r2, rc, n, tokens = want
    p = plan_image(vlmprep.presets.get("idefics3"), hw)
    assert p.canvases[0].resize_hw == r1 and p.resized_hw == r2 and p.canvases[1].resize_hw == r2
    assert _rows_cols(p) == rc and len(p.tiles) == n and p.num_tokens == tokens
    assert p.grid_thw == [(1, 26, 26)] * n and p.num_patches == 676 * n
    # row-major tiles of the resize-2 canvas, then the global image from its own canvas
    assert p.tiles[:-1] == [(r * 364, c * 364, 364, 364) for r in range(rc[0]) for c in range(rc[1])]
    assert p.tile_canvas == [1] * (n - 1) + [2] and p.canvases[2].resize_hw == (364, 364)
    assert p.canvases[2].parent == 1 and p.canvases[1].parent == 0


@pytest.mark.parametrize("hw,want", SMOLVLM_TABLE.items())
def test_smolvlm_table(hw, want):
    p = plan_image(vlmprep.presets.from_config(config("smolvlm")), hw)
    assert (_rows_cols(p), len(p.tiles)) == want
    rows, cols = want[0]
    assert p.num_tokens == rows * (cols * 66 + 1) + 67  # S = 64
    assert p.grid_thw[0] == (1, 32, 32)  # patch 16


def _shape_only(h, w):
    """A (3, h, w) uint8 stand-in that costs no memory (transformers reads shape and slices)."""
    return np.broadcast_to(np.uint8(0), (3, h, w))


def _hf_geometry(hf, hw, L, M, split=True):
    """transformers' own chain on shape-only images -> (resize 1, resize 2, tile shapes, rows, cols).

    ``resize`` is replaced on the instance by one that records the size and returns a stand-in:
    every size decision is still transformers' code."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import get_resize_output_image_size
    fake = types.SimpleNamespace()

    def resize(image, size, resample=None, **kw):
        return _shape_only(size.height, size.width)
    fake.resize = resize
    r1 = get_resize_output_image_size(_shape_only(*hw), resolution_max_side=L)
    if not split:
        return r1, (M, M), [(M, M)], 0, 0
    img2 = type(hf).resize_for_vision_encoder(fake, _shape_only(*r1), M)
    frames, rows, cols = type(hf).split_images(fake, img2, {"longest_edge": M})
    return r1, img2.shape[1:], [f.shape[1:] for f in frames], rows, cols


# (longest_edge, tile): the four public configs, the class default, a resize 1 below one tile,
# and one whose resize 1 exceeds transformers' 4096 cap.
SWEEP_CONFIGS = [(1820, 364), (2048, 512), (1536, 384), (1456, 364), (300, 364), (5000, 512)]


@pytest.mark.hf
def test_geometry_sweep_matches_transformers(seed):
    hf = hf_processor("idefics3", "pil")
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 5000, (250, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 80, (60, 2))]
    sizes += [(h, w) for h in (1, 2, 3, 23, 46, 49, 364, 365) for w in (1, 2, 17, 364, 900, 4000)]
    for L, M in SWEEP_CONFIGS:
        for split in (True, False):
            pipe = vlmprep.presets.get("idefics3", longest_edge=L, tile_size=M, split=split)
            for hw in sizes:
                r1, r2, shapes, rows, cols = _hf_geometry(hf, hw, L, M, split)
                p = plan_image(pipe, hw)
                assert p.canvases[0].resize_hw == tuple(r1), (seed, L, M, hw)
                assert p.resized_hw == tuple(r2), (seed, L, M, hw)
                assert [b[2:] for b in p.tiles] == [tuple(s) for s in shapes], (seed, L, M, hw)
                assert _rows_cols(p) == (rows, cols), (seed, L, M, hw)
                # what vLLM counts with (it reads H, W directly, not the float round trip)
                n, nr, nc = hf.get_number_of_image_patches(
                    *hw, {"size": {"longest_edge": L}, "max_image_size": {"longest_edge": M},
                          "do_image_splitting": split})
                assert (nr, nc) == (rows, cols) and n == (len(p.tiles) if rows else 0)


class _Tok:
    """A tokenizer that keeps "\\n\\n" as one token, as the Llama 3 and SmolLM2 ones do."""

    def __call__(self, text, add_special_tokens=False):
        assert text == "\n\n"
        return {"input_ids": [271]}


def _hf_text(S):
    """transformers' Idefics3Processor methods bound to a minimal stand-in (no tokenizer files)."""
    from transformers import Idefics3Processor
    fake = types.SimpleNamespace(
        fake_image_token=FAKE, image_token="<image>", global_image_tag=GLOBAL, image_seq_len=S,
        tokenizer=_Tok(), _merge_kwargs=lambda **kw: {"images_kwargs": {}})

    def placeholder(rows, cols):
        return Idefics3Processor.replace_image_token(fake, {"rows": [[rows]], "cols": [[cols]]}, 0)

    def tokens(hw, image_processor):
        fake.image_processor = image_processor
        out = Idefics3Processor._get_num_multimodal_tokens(fake, image_sizes=[hw])
        return out["num_image_tokens"][0]
    return placeholder, tokens


@pytest.mark.hf
def test_placeholder_and_tokens_match_idefics3_processor(seed):
    placeholder, tokens = _hf_text(169)
    hf = hf_processor("idefics3", "pil")
    pipe = vlmprep.presets.get("idefics3")
    rng = np.random.default_rng(seed)
    sizes = list(IDEFICS3_TABLE) + [(int(h), int(w)) for h, w in rng.integers(1, 4000, (30, 2))]
    for hw in sizes:
        p = plan_image(pipe, hw)
        assert p.placeholder == placeholder(*_rows_cols(p)), hw
        assert p.num_tokens == tokens(hw, hf), hw
    # unsplit (do_image_splitting=False): the global image alone, S + 3 tokens
    p = plan_image(vlmprep.presets.get("idefics3", split=False), (480, 640))
    assert p.placeholder == placeholder(0, 0) == FAKE + GLOBAL + "<image>" * 169 + FAKE
    assert p.num_tokens == 172 and len(p.tiles) == 1
    # the string's shape, spelled out once (PEERS.md 2.8)
    p = plan_image(vlmprep.presets.get("idefics3", image_seq_len=1), (17, 900))
    row = "".join(f"{FAKE}<row_1_col_{c}><image>" for c in range(1, 6))
    assert p.placeholder == row + "\n\n" + FAKE + GLOBAL + "<image>" + FAKE


# -- pixels and to_hf --------------------------------------------------------------------------
def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


@pytest.fixture(scope="module")
def mixed():
    """Real photos of odd sizes (one below a tile on each side) as bytes, PIL, array, tensor."""
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 31, 1390)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle_in


@pytest.fixture(scope="module")
def oracle(mixed):
    _, oracle_in = mixed
    return {"raw": hf_outputs("idefics3", "pil", oracle_in, raw=True),
            "float": hf_outputs("idefics3", "pil", oracle_in)}


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_match_transformers(backend, mixed, oracle):
    items, _ = mixed
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    # uint8: resized, split, not normalized, against the raw oracle (a flat list is ONE sample).
    got = _proc(backend=backend, dtype="uint8")(items)
    hf, want = got.to_hf(), oracle["raw"]
    assert got.layout == "tiles" and got.pixel_values.dtype == torch.uint8
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (1, 65, 3, 364, 364)
    mx, mean = _levels(hf["pixel_values"], want["pixel_values"])
    print(backend, "uint8 levels max", mx, "mean", mean)
    assert mx <= bound[0] and mean <= bound[1], (backend, mx, mean)
    # float32 to_hf against the normalized oracle: same keys, shapes, dtypes, values.
    got = _proc(backend=backend)(items)
    hf, want = got.to_hf(), oracle["float"]
    assert set(hf) == set(want) == {"pixel_values", "pixel_attention_mask"}
    for k in want:
        assert hf[k].shape == want[k].shape and hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["pixel_attention_mask"], want["pixel_attention_mask"])
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:
        level = 1 / 255 / 0.5
        mx, mean = _levels(hf["pixel_values"], want["pixel_values"])
        assert mx <= 3 * level + 1e-5 and mean <= 0.5 * level
    # PackedBatch: one ViT sequence per tile; plan() equals what proc() made.
    plan = _proc(backend=backend).plan(items)
    assert torch.bincount(got.image_index, minlength=5).tolist() == [len(p.tiles) for p in plan]
    hf_ip = hf_processor("idefics3", "pil")
    assert [len(p.tiles) for p in plan] == [hf_ip.get_number_of_image_patches(*p.source_hw)[0]
                                            for p in plan]
    assert got.num_tokens == plan.num_tokens and got.placeholders == [p.placeholder for p in plan]
    assert got.seqlens == [676] * 65 and got.grid_thw.tolist() == [[1, 26, 26]] * 65


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_multi_image_samples_match_transformers(backend, mixed):
    """``to_hf(images_per_sample)`` = the processor on a nested list; zero padding over the batch;
    rows / cols from the processor equal the plan's (what the prompt string is built from)."""
    from PIL import Image
    items, oracle_in = mixed
    small = crop("camera", 40, 300)  # 364 x 1820: 5 tiles + global
    items, oracle_in = items[2:4] + [small], oracle_in[2:4] + [Image.fromarray(small)]
    per_sample = [2, 0, 1]
    nested = [oracle_in[:2], [], oracle_in[2:]]
    want = dict(hf_processor("idefics3", "pil")(nested, return_tensors="pt",
                                                return_row_col_info=True))
    got = _proc(backend=backend)(items)
    hf = got.to_hf(images_per_sample=per_sample)
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (3, 12, 3, 364, 364)
    assert torch.equal(hf["pixel_attention_mask"], want["pixel_attention_mask"])
    assert hf["pixel_attention_mask"][1].sum() == 0 and hf["pixel_attention_mask"][2, 6:].sum() == 0
    assert torch.equal(hf["pixel_values"][2, 6:], torch.zeros(6, 3, 364, 364))
    mx, _ = _levels(hf["pixel_values"], want["pixel_values"])
    assert mx <= (0 if backend == "reference" else 3 / 127.5 + 1e-5)
    plan = _proc().plan(items)
    assert [_rows_cols(p) for p in plan] == [(r, c) for rs, cs in zip(want["rows"], want["cols"])
                                             for r, c in zip(rs, cs)]
    with pytest.raises(ValueError, match="summing to 3"):
        got.to_hf(images_per_sample=[1, 1])


@pytest.mark.hf
@pytest.mark.parametrize("overrides", [dict(split=False), dict(longest_edge=300)],
                         ids=["no-split", "below-one-tile"])
def test_unsplit_images_match_transformers(overrides):
    """One M x M image and no global copy: ``do_image_splitting=False`` (squash), and a resize 1
    that stays within one tile (transformers keeps the resized image alone)."""
    import transformers
    from PIL import Image
    arrs = [crop("coffee", 33, 250), crop("astronaut", 301, 77)]
    cfg = {k: v for k, v in config("idefics3").items()
           if k not in ("image_processor_type", "processor_class")}
    if "split" in overrides:
        cfg["do_image_splitting"] = False
    else:
        cfg["size"] = {"longest_edge": overrides["longest_edge"]}
    want = transformers.Idefics3ImageProcessorPil(**cfg)([Image.fromarray(a) for a in arrs],
                                                         return_tensors="pt")
    proc = _proc(backend="reference", **overrides)
    assert [len(p.tiles) for p in proc.plan(arrs)] == [1, 1]
    hf = proc(arrs).to_hf()
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (1, 2, 3, 364, 364)
    assert torch.equal(hf["pixel_values"], want["pixel_values"])
    assert torch.equal(hf["pixel_attention_mask"], want["pixel_attention_mask"])


@pytest.mark.hf
def test_smolvlm_config_pixels_match_transformers():
    """A SmolVLM2 config (SmolVLMImageProcessor, 2048 / 512) through from_pretrained."""
    from PIL import Image
    arrs = [crop("chelsea", 17, 451), crop("hopper", 211, 130)]
    want = hf_outputs("smolvlm", "pil", [Image.fromarray(a) for a in arrs])
    hf = _proc("smolvlm", backend="reference")(arrs).to_hf()
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (1, 18, 3, 512, 512)
    assert torch.equal(hf["pixel_values"], want["pixel_values"])
    assert torch.equal(hf["pixel_attention_mask"], want["pixel_attention_mask"])


def test_split_concat_and_skip(seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 120)), int(rng.integers(1, 120)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor("idefics3", backend="reference", errors="skip", longest_edge=728)
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    parts = list(b.split())
    want = [len(proc.plan([x]).images[0].tiles) for x in imgs]
    assert [p.num_seqs for p in parts] == [want[0], 0, want[1], want[2]]
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        assert torch.equal(part.pixel_values, proc([img]).pixel_values)
        assert part.to_hf()["pixel_values"].shape[:2] == (1, part.num_seqs)
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    # skipped images are absent from to_hf (the three good ones are one sample)
    assert b.to_hf()["pixel_values"].shape[:2] == (1, sum(want))


def test_from_pretrained_recognises_idefics3_and_smolvlm():
    assert vlmprep.presets.from_config(config("idefics3")) == vlmprep.presets.get("idefics3")
    smol = vlmprep.presets.from_config(config("smolvlm"))
    op = smol["idefics3_tile"]
    assert (op.longest_edge, op.tile_size, op.image_seq_len, op.interpolation) == (2048, 512, 64,
                                                                                   "lanczos")
    assert (smol.patchify.patch_size, smol.patchify.merge_size) == (16, 4)
    # SmolVLM v1 checkpoints carry Idefics3 types; SmolVLM-Instruct (2B): 1536 / 384, S = 81.
    cfg = dict(config("idefics3"), image_processor_type="Idefics3ImageProcessorFast",
               size={"longest_edge": 1536}, max_image_size={"longest_edge": 384})
    assert vlmprep.presets.from_config(cfg)["idefics3_tile"].image_seq_len == 81
    cfg = dict(config("smolvlm"), image_processor_type="SmolVLMImageProcessorPil", image_seq_len=7)
    assert vlmprep.presets.from_config(cfg)["idefics3_tile"].image_seq_len == 7
    with pytest.raises(ValueError, match="do_pad expected true"):
        vlmprep.presets.from_config(dict(config("idefics3"), do_pad=False))
    with pytest.raises(ValueError, match="longest_edge"):
        vlmprep.presets.from_config(dict(config("idefics3"), size={"height": 5, "width": 5}))


def test_op_validation_and_round_trip():
    from vlmprep import ops
    with pytest.raises(ValueError, match="tile_size"):
        ops.idefics3_tile(tile_size=0)
    with pytest.raises(ValueError, match="split"):
        ops.idefics3_tile(split=1)
    pipe = vlmprep.presets.get("idefics3", image_seq_len=81, longest_edge=1536, tile_size=384)
    assert vlmprep.Pipeline.from_dict(pipe.to_dict()) == pipe
    assert pipe.tile_hw == (384, 384)
