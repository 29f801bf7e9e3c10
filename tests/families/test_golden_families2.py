"""plan_image reproduces the committed golden table of the six issue-30 families (made by
transformers; no transformers needed here).

``tests/data/golden_families2.json`` is written by ``tests/data/make_golden_families2.py`` with
transformers' image processors (PIL where the family has one, else torchvision) and the family
Processors' ``replace_image_token`` as the oracle; see that script for the row fields. Each row is
compared with ``plan_image(presets.get(preset), (H, W))``: the output shapes, the family's own
output fields through their plan-level equivalents (as ``vlmprep.hf_forms`` builds them),
``num_tokens``, ``num_embeddings`` and the placeholder string (its SHA-1).
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

import vlmprep
from tests.families.test_golden_families import _runs
from vlmprep import ImageError
from vlmprep.plan import plan_image
from vlmprep.plan.lfm2_vl import lfm2_max_num_patches
from vlmprep.plan.phi4_multimodal import phi4_mask_valid

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden_families2.json"
PRESETS = ["llama4", "glm4v", "minicpm-v", "phi4-multimodal", "ovis2", "lfm2-vl"]


@pytest.fixture(scope="module")
def golden() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def _rle(values) -> list[list[int]]:
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([int(v), 1])
    return out


def _t(x):
    """Tuples to lists, ints to int (the JSON's types); strings as they are."""
    if isinstance(x, (list, tuple)):
        return [_t(v) for v in x]
    return x if isinstance(x, str) else int(x)


def test_table_shape(golden):
    assert golden["transformers"]  # the oracle's version
    assert golden["presets"] == PRESETS
    n = Counter(r["preset"] for r in golden["rows"])
    assert set(n) == set(PRESETS) and all(n[p] >= 40 for p in PRESETS), n
    keys = [(r["preset"], tuple(r["hw"])) for r in golden["rows"]]
    assert len(keys) == len(set(keys)), "duplicate rows"
    for p in PRESETS:  # 1x1, both extreme aspect ratios and the largest square in every family
        hws = {tuple(r["hw"]) for r in golden["rows"] if r["preset"] == p}
        assert {(1, 1), (1, 1500), (1500, 1), (13377, 13377)} <= hws, p
    assert vlmprep.presets.get("lfm2-vl").sizing.use_thumbnail  # _expected's image_sizes


def _phi4_mask(p, op) -> list[list[int]]:
    """Per-crop sums of ``image_attention_mask`` (hf_forms' phi4_multimodal form): the global
    view all ones, then each crop's share of the unmasked ``vr x vc`` corner, row-major."""
    t, m = op.tile_size, op.tile_size // op.patch_size
    (h, w), (vr, vc) = p.canvases[0].hw, phi4_mask_valid(p.canvases[0].resize_hw,
                                                         p.canvases[0].hw, op)
    sums = [m * m] + [max(0, min(m, vr - i * m)) * max(0, min(m, vc - j * m))
                      for i in range(h // t) for j in range(w // t)]
    return _rle(sums)


def _expected(preset: str, p, pipe) -> dict:
    """The row's fields as vlmprep's plan gives them."""
    n = len(p.tiles)
    e: dict = {"tokens": p.num_tokens, "embeddings": p.num_embeddings,
               "placeholder": hashlib.sha1(p.placeholder.encode()).hexdigest()[:16]}
    op, pf = pipe.sizing, pipe.patchify
    if preset == "llama4":
        t = op.tile_size
        e["pv"] = [n, 3, t, t]
        e["aspect_ratios"] = [[p.canvases[0].hw[0] // t, p.canvases[0].hw[1] // t]]
    elif preset == "glm4v":
        e["pv"] = [p.num_patches, 3 * pf.temporal_patch_size * pf.patch_size ** 2]
        e["image_grid_thw"] = [list(p.grid_thw[0])]
        e["mm_tokens"], e["mm_patches"] = p.num_embeddings, p.num_patches
    elif preset == "minicpm-v":
        s = pf.patch_size
        e["pv"] = [1, 3, s, s * p.num_patches]
        e["target_sizes"] = _runs([(b[2] // s, b[3] // s) for b in p.tiles])
        e["grids"] = [[0, 0] if n == 1 else [p.canvases[1].resize_hw[0] // p.tiles[-1][2],
                                             p.canvases[1].resize_hw[1] // p.tiles[-1][3]]]
        e["num_patches_per_image"] = [n]
    elif preset == "phi4-multimodal":
        t = op.tile_size
        e["pv"] = [1, n, 3, t, t]
        e["image_sizes"] = [list(p.canvases[0].hw)]
        e["num_img_tokens"] = [p.num_tokens]
        e["mask"] = _phi4_mask(p, op)
    elif preset == "ovis2":
        t = op.tile_size
        e["pv"] = [n, 3, t, t]
        e["grids"] = [[p.canvases[0].resize_hw[0] // t, p.canvases[0].resize_hw[1] // t]]
    elif preset == "lfm2-vl":
        t, width = op.tile_size, lfm2_max_num_patches(op, pf.patch_size, pf.merge_size)
        e["pv"] = [n, width, 3 * pf.patch_size ** 2]
        e["mask_len"] = width
        e["spatial_shapes"] = _runs([g[1:] for g in p.grid_thw])
        e["mask"] = _rle([g[1] * g[2] for g in p.grid_thw])
        rows, cols = ((p.canvases[0].resize_hw[0] // t, p.canvases[0].resize_hw[1] // t)
                      if n > 1 else (1, 1))
        e["image_rows"], e["image_cols"] = [rows], [cols]
        e["image_sizes"] = [list(p.canvases[-1].resize_hw)]  # the smart resize (thumbnail)
    return e


def _refused(preset: str, r: dict) -> str | None:
    """Why vlmprep must refuse the row's size: transformers raised, or (lfm2-vl) it emitted a
    sequence longer than its attention mask (test_lfm2_vl's test_what_transformers_cannot_pad_is_
    refused)."""
    if "error" in r:
        return "transformers: " + r["error"]
    if preset == "lfm2-vl" and r["pv"][1] > r["mask_len"]:
        return f"transformers: {r['pv'][1]} rows with a {r['mask_len']}-long mask"
    return None


@pytest.mark.parametrize("preset", PRESETS)
def test_plan_image_reproduces_golden(golden, preset):
    pipe = vlmprep.presets.get(preset)
    rows = [r for r in golden["rows"] if r["preset"] == preset]
    bad = []
    for r in rows:
        hw = tuple(r["hw"])
        why = _refused(preset, r)
        if why is not None:
            try:
                p = plan_image(pipe, hw)
            except ImageError:
                continue
            bad.append((hw, why, "vlmprep plans", p.resized_hw, len(p.tiles)))
            continue
        try:
            p = plan_image(pipe, hw)
            want = {k: v for k, v in r.items() if k not in ("preset", "hw", "default_pv")}
            got = {k: _t(v) for k, v in _expected(preset, p, pipe).items()}
        except ImageError as e:
            bad.append((hw, f"{type(e).__name__}: {e}"))
            continue
        diff = {k: (want.get(k), got.get(k)) for k in set(want) | set(got)
                if want.get(k) != got.get(k)}
        if diff:
            bad.append((hw, diff))
    assert not bad, f"{preset}: {len(bad)} of {len(rows)} golden rows differ " \
        "(transformers, vlmprep):\n" + "\n".join(f"  {b}" for b in bad[:20])
