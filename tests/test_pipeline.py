"""The pipeline-definition API: presets, ops, replace, to_dict/from_dict, from_pretrained."""
from __future__ import annotations

import json

import pytest

import vlmprep
from vlmprep import hf_forms, ops

# Public checkpoint values (PEERS.md 2.1, 2.2), written out here, not read from vlmprep.
QWEN2 = dict(factor=28, min_pixels=3136, max_pixels=12_845_056, patch_size=14,
             mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711))
QWEN3 = dict(factor=32, min_pixels=65_536, max_pixels=16_777_216, patch_size=16,
             mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def test_names():
    assert {"qwen2-vl", "qwen3-vl"} <= set(vlmprep.presets.names())


@pytest.mark.parametrize("name,want", [("qwen2-vl", QWEN2), ("qwen3-vl", QWEN3)])
def test_checkpoint_values(name, want):
    p = vlmprep.presets.get(name)
    sr, nz, pf = p["smart_resize"], p["normalize"], p["patchify"]
    assert (sr.factor, sr.min_pixels, sr.max_pixels) == (want["factor"], want["min_pixels"],
                                                        want["max_pixels"])
    assert sr.interpolation == "bicubic" and sr.max_aspect_ratio == 200
    assert (pf.patch_size, pf.temporal_patch_size, pf.merge_size) == (want["patch_size"], 2, 2)
    assert nz.mean == want["mean"] and nz.std == want["std"] and nz.rescale == 1 / 255
    assert p.pack.image_token == "<|image_pad|>"


def test_replace_and_overrides():
    p = vlmprep.presets.get("qwen2-vl")
    q = p.replace(max_pixels=1_003_520, patch_size=14)
    assert q["smart_resize"].max_pixels == 1_003_520 and p["smart_resize"].max_pixels == 12_845_056
    assert vlmprep.presets.get("qwen2-vl", max_pixels=1_003_520) == q
    assert vlmprep.Processor("qwen2-vl", backend="reference", max_pixels=1_003_520).pipeline == q
    with pytest.raises(TypeError, match="no op has a field 'max_pixel'"):
        p.replace(max_pixel=5)
    with pytest.raises(ValueError, match="min_pixels"):
        p.replace(min_pixels=10**9)
    with pytest.raises(ValueError, match="interpolation"):
        p.replace(interpolation="cubic")
    assert p.replace(smart_resize__interpolation="bilinear")["smart_resize"].interpolation == "bilinear"


def test_round_trip_json():
    for name in vlmprep.presets.names():
        p = vlmprep.presets.get(name).replace(rescale=0.5)
        d = json.loads(json.dumps(p.to_dict()))
        assert vlmprep.Pipeline.from_dict(d) == p
    with pytest.raises(ValueError, match="expected one of"):
        vlmprep.Pipeline.from_dict({"ops": [{"op": "nope"}]})


def test_custom_pipeline_equals_preset(seed):
    # The API.md example: a user-built pipeline works wherever a preset name does.
    custom = vlmprep.Pipeline([
        ops.decode(),
        ops.smart_resize(factor=28, min_pixels=3136, max_pixels=12_845_056,
                         interpolation="bicubic"),
        ops.normalize(rescale=1 / 255, mean=QWEN2["mean"], std=QWEN2["std"]),
        ops.patchify(patch_size=14, temporal_patch_size=2, merge_size=2, order="merge_grouped"),
    ])
    preset = vlmprep.presets.get("qwen2-vl")
    # Without a pack op it gets pack()'s neutral "<image>" token; everything else is the preset's,
    # and with Qwen's token spelled out it is the preset.
    assert custom.ops[:-1] == preset.ops[:-1] and custom.pack.image_token == "<image>"
    assert vlmprep.Pipeline([*custom.ops[:-1], ops.pack(image_token="<|image_pad|>")]).ops == preset.ops
    import numpy as np
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (61, 97, 3), dtype=np.uint8)
    a = vlmprep.Processor(custom, backend="reference")([img])
    b = vlmprep.Processor("qwen2-vl", backend="reference")([img])
    assert a.pixel_values.equal(b.pixel_values)
    assert a.num_tokens == b.num_tokens and a.grid_thw.tolist() == b.grid_thw.tolist()
    assert "smart_resize(factor=28" in repr(custom)


def test_pipeline_validation():
    with pytest.raises(ValueError, match="sizing op"):
        vlmprep.Pipeline([ops.normalize(), ops.patchify()])
    with pytest.raises(ValueError, match="patchify"):
        vlmprep.Pipeline([ops.smart_resize()])
    with pytest.raises(TypeError, match="vlmprep.ops"):
        vlmprep.Pipeline([ops.smart_resize(), "patchify"])
    with pytest.raises(ValueError, match="appears 2 times"):
        vlmprep.Pipeline([ops.smart_resize(), ops.normalize(), ops.normalize(), ops.patchify()])
    with pytest.raises(KeyError, match="unknown preset"):
        vlmprep.presets.get("qwen9")


def _write(tmp_path, cfg):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "preprocessor_config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("cfg,want", [
    # transformers 4.x spelling (Qwen2-VL-7B-Instruct)
    ({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
      "merge_size": 2, "image_mean": list(QWEN2["mean"]), "image_std": list(QWEN2["std"]),
      "image_processor_type": "Qwen2VLImageProcessor"}, ("qwen2-vl", 28, 3136, 12845056)),
    # transformers 5.x spelling (Qwen3-VL-8B-Instruct)
    ({"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
      "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
      "image_processor_type": "Qwen2VLImageProcessorFast"}, ("qwen3-vl", 32, 65536, 16777216)),
    # both: top-level min/max_pixels win, as in transformers
    ({"size": {"shortest_edge": 1, "longest_edge": 2}, "min_pixels": 3136, "max_pixels": 1003520,
      "image_processor_type": "Qwen2VLImageProcessorPil"}, ("qwen2-vl", 28, 3136, 1003520)),
    # nothing but the type: the class defaults
    ({"image_processor_type": "Qwen2VLImageProcessor"}, ("qwen2-vl", 28, 3136, 1003520)),
])
def test_from_pretrained(tmp_path, cfg, want):
    d = _write(tmp_path, cfg)
    for path in (d, d / "preprocessor_config.json"):
        proc = vlmprep.Processor.from_pretrained(path, backend="reference")
        sr = proc.pipeline["smart_resize"]
        assert (proc.pipeline.name, sr.factor, sr.min_pixels, sr.max_pixels) == want


@pytest.mark.hf
def test_from_pretrained_matches_transformers_flags(tmp_path, seed):
    # do_normalize=false / do_rescale=false behave as in transformers' PIL backend.
    import numpy as np
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil
    cfg = {"image_processor_type": "Qwen2VLImageProcessor", "do_normalize": False,
           "min_pixels": 3136, "max_pixels": 12845056}
    img = np.random.default_rng(seed).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    ours = vlmprep.Processor.from_pretrained(_write(tmp_path, cfg), backend="reference")([img])
    theirs = Qwen2VLImageProcessorPil(do_normalize=False, min_pixels=3136, max_pixels=12845056)(
        [Image.fromarray(img)], return_tensors="pt")
    assert ours.pixel_values.equal(theirs["pixel_values"])


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        vlmprep.Processor.from_pretrained(tmp_path / "missing")
    d = _write(tmp_path, {"image_processor_type": "SomethingElse"})
    with pytest.raises(ValueError, match="not a family vlmprep knows"):
        vlmprep.Processor.from_pretrained(d)


# -- deprecated spellings (API.md's): they keep working, warn, and give the current form ----------
def test_patchify_layout_is_a_deprecated_alias_of_order():
    with pytest.warns(DeprecationWarning, match="order"):
        old = ops.patchify(patch_size=14, temporal_patch_size=2, merge_size=2,
                           layout="merge_grouped")
    assert old == ops.patchify(patch_size=14, temporal_patch_size=2, merge_size=2,
                               order="merge_grouped")
    with pytest.warns(DeprecationWarning):
        assert ops.patchify(temporal_patch_size=1, layout="raster").order == "raster"
    assert "layout" not in old.to_dict() and "layout" not in ops.patchify.field_names()
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="pass order= only"):
        ops.patchify(temporal_patch_size=1, order="tiles", layout="raster")


def test_tile_is_a_deprecated_alias_of_internvl_tile():
    with pytest.warns(DeprecationWarning, match="internvl_tile"):
        old = ops.tile(rule="internvl", tile_size=448, max_tiles=6)
    assert old == ops.internvl_tile(tile_size=448, max_tiles=6)
    assert old.name == "internvl_tile" and "rule" not in old.to_dict()
    with pytest.warns(DeprecationWarning):  # the old positional order: rule, tile_size, ...
        assert ops.tile("internvl", 336, 1, 4) == ops.internvl_tile(tile_size=336, max_tiles=4)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="rule"):
        ops.tile(rule="llava")
    assert "tile" not in ops.OP_TYPES  # a function, not an op: one name per op


def test_from_dict_reads_old_spellings():
    new = vlmprep.presets.get("internvl")
    d = json.loads(json.dumps(new.to_dict()))
    for od in d["ops"]:
        if od["op"] == "internvl_tile":
            od.update(op="tile", rule="internvl")
        if od["op"] == "patchify":
            od["layout"] = od.pop("order")
    with pytest.warns(DeprecationWarning) as rec:
        assert vlmprep.Pipeline.from_dict(d) == new
    assert {"tile", "layout"} <= {w for r in rec for w in ("tile", "layout") if w in str(r.message)}
    bad = json.loads(json.dumps(d))
    next(od for od in bad["ops"] if od["op"] == "tile")["rule"] = "other"
    with pytest.raises(ValueError, match="rule='internvl'"):
        vlmprep.Pipeline.from_dict(bad)


# -- registries: every name list is derived from one declaration ---------------------------------
def test_every_sizing_op_has_one_plan_rule_and_owns_its_tile_size():
    from vlmprep.plan import SIZING_RULES
    builtin = {n: t for n, t in ops.OP_TYPES.items() if t.__module__ == "vlmprep.ops"}
    sizing = {n for n, t in builtin.items() if t.sizing}
    assert sizing <= set(SIZING_RULES)  # (user ops, e.g. tests/test_extension.py's, may add more)
    assert set(builtin) <= set(ops.__all__)
    # Each preset's tile size comes from its sizing op (or its centre crop), as the op says.
    want = {"siglip": (384, 384), "llava-1.5": (336, 336), "internvl": (448, 448),
            "llava-next": (336, 336), "llava-onevision": (384, 384), "mllama": (560, 560),
            "idefics3": (364, 364), "gemma3": (896, 896), "qwen2-vl": None, "qwen3-vl": None,
            "pixtral": None, "siglip2-naflex": None, "ovis2": (448, 448),
            "glm4v": None, "minicpm-v": None, "lfm2-vl": None, "llama4": (336, 336),
            "phi4-multimodal": (448, 448)}
    assert {n: vlmprep.presets.get(n).tile_hw for n in vlmprep.presets.names()} == want
    assert ops.resize(mode="shortest_edge", size=336).tile_hw is None


def test_an_unregistered_hf_output_is_refused_when_the_processor_is_made():
    """ops.pack checks only the name's form (the registry is a layer above); the Processor
    checks the registry at construction, so a typo never waits for to_hf()."""
    ops.pack(hf_output="qwen2vl_typo")  # well formed: accepted by the op
    with pytest.raises(ValueError, match=r"pack.hf_output expected one of .*'qwen2_vl'.*got "
                                         r"'qwen2vl_typo'.*@vlmprep.hf_forms.hf_form"):
        vlmprep.Processor("qwen2-vl", hf_output="qwen2vl_typo")


def test_hf_forms_and_presets_come_from_their_registries():
    from vlmprep.hf_forms import HF_FORMS
    assert set(HF_FORMS) == set(hf_forms.HF_OUTPUTS) - {"auto"}
    fams = vlmprep.presets.FAMILIES
    assert vlmprep.presets.names() == sorted(n for f in fams for n in f.PRESETS)
    for name in vlmprep.presets.names():
        assert vlmprep.presets.get(name).name == name
        assert name in vlmprep.presets.family(name).PRESETS


def test_normalize_for_and_executed_ops_decide_uint8_once():
    """"uint8 means no normalize" is the pipeline's answer (normalize_for / executed_ops), and
    what every backend runs: its ops, its fused lut."""
    p = vlmprep.presets.get("qwen2-vl")
    assert p.normalize_for("float32") is p.normalize and p.normalize_for("bfloat16") is p.normalize
    assert p.normalize_for("uint8") is None
    assert [o.name for o in p.executed_ops("float32")] == ["decode", "smart_resize", "normalize",
                                                          "patchify"]
    assert [o.name for o in p.executed_ops("uint8")] == ["decode", "smart_resize", "patchify"]
    bare = vlmprep.Pipeline([o for o in p if o.name != "normalize"])
    assert bare.normalize_for("float32") is None
    assert [o.name for o in bare.executed_ops("float32")] == ["decode", "smart_resize", "patchify"]
    for dtype in ("float32", "uint8"):
        backend = vlmprep.Processor(p, backend="reference", dtype=dtype)._backend
        assert tuple(backend.ops) == p.executed_ops(dtype)
