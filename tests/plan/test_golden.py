"""plan_image reproduces the committed golden table (made by transformers; no transformers here).

``tests/data/golden_qwen.json`` is written by ``tests/data/make_golden.py`` with transformers as the
oracle. A row: preset (+ overrides), source ``hw``, and either ``"error"`` (aspect ratio > 200) or
``resized_hw``, ``grid_thw``, ``num_patches``, ``num_tokens``. The PEERS.md rows are also written
out here by hand, so the table is checked against the spec document too.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import vlmprep
from vlmprep import ImageError
from vlmprep.plan import plan_image

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden_qwen.json"
CONFIG_NAMES = ("qwen2-vl", "qwen3-vl", "class-default")
IMAGE_TOKEN = "<|image_pad|>"


def _t(x) -> tuple:
    """Nested sequences -> nested tuples (API.md says "list of"; compare values, not types)."""
    return tuple(_t(v) for v in x) if isinstance(x, (list, tuple)) else x


@pytest.fixture(scope="module")
def golden() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def _key(preset: str, overrides: dict | None, hw) -> tuple:
    return preset, tuple(sorted((overrides or {}).items())), tuple(hw)


def _config_of(row: dict, golden: dict) -> str:
    for name, c in golden["configs"].items():
        if c["preset"] == row["preset"] and c["overrides"] == row.get("overrides", {}):
            return name
    raise AssertionError(f"row matches no config of the table: {row}")


def test_table_shape(golden):
    """The table is the one described: versioned, ~300 rows, every config, every kind of case."""
    assert golden["transformers"]  # the oracle's version, recorded by make_golden.py
    assert set(golden["configs"]) == set(CONFIG_NAMES)
    rows = golden["rows"]
    assert 250 <= len(rows) <= 400
    per_config = Counter(_config_of(r, golden) for r in rows)
    assert all(per_config[c] >= 30 for c in CONFIG_NAMES), per_config
    kinds = {r["why"] for r in rows if _config_of(r, golden) in ("qwen2-vl", "qwen3-vl")}
    assert {"peers", "aspect", "tiny", "edge", "max", "min", "float", "exact", "random"} <= kinds
    assert sum("error" in r for r in rows) >= 20
    keys = [_key(r["preset"], r.get("overrides"), r["hw"]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicate rows"


def test_table_configs_are_the_presets(golden):
    """The configs transformers was run with are the presets' smart_resize / patchify values."""
    for name, c in golden["configs"].items():
        pipe = vlmprep.presets.get(c["preset"], **c["overrides"])
        sr, pf = pipe["smart_resize"], pipe.patchify
        assert (sr.factor, sr.min_pixels, sr.max_pixels) == (
            c["factor"], c["min_pixels"], c["max_pixels"]), name
        assert (pf.patch_size, pf.merge_size) == (c["patch_size"], 2), name


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_plan_image_reproduces_golden(golden, config):
    c = golden["configs"][config]
    pipe = vlmprep.presets.get(c["preset"], **c["overrides"])
    rows = [r for r in golden["rows"] if _config_of(r, golden) == config]
    bad = []
    for r in rows:
        hw = tuple(r["hw"])
        if "error" in r:  # transformers raised ValueError: we raise ImageError
            try:
                p = plan_image(pipe, hw)
            except ImageError:
                continue
            bad.append((hw, "error", p.resized_hw))
            continue
        try:
            p = plan_image(pipe, hw)
        except ImageError as e:
            bad.append((hw, r["resized_hw"], f"ImageError: {e}"))
            continue
        rh, rw = r["resized_hw"]
        want = ((rh, rw), ((0, 0, rh, rw),), tuple(tuple(g) for g in r["grid_thw"]),
                r["num_patches"], r["num_tokens"], IMAGE_TOKEN * r["num_tokens"], None)
        got = (_t(p.resized_hw), _t(p.tiles), _t(p.grid_thw), p.num_patches, p.num_tokens,
               p.placeholder, p.error)
        if want != got:
            bad.append((hw, r["why"], want[:5], got[:5]))
    assert not bad, f"{config}: {len(bad)} of {len(rows)} golden rows differ:\n" + \
        "\n".join(f"  {b}" for b in bad[:20])


# PEERS.md §2.1 / §2.2, copied by hand: (config, (H, W), resized, grid_thw, num_patches, tokens);
# None where the document does not state the value. "error": PEERS §2.1 step 1 (ratio > 200).
PEERS_ROWS = [
    # §2.1 table (checkpoint config); num_patches = pixel_values rows
    ("qwen2-vl", (1, 1), (56, 56), (1, 4, 4), 16, 4),
    ("qwen2-vl", (17, 900), (28, 896), (1, 2, 64), 128, 32),
    ("qwen2-vl", (900, 17), (896, 28), (1, 64, 2), 128, 32),
    ("qwen2-vl", (333, 777), (336, 784), (1, 24, 56), 1344, 336),
    ("qwen2-vl", (1080, 1920), (1092, 1932), (1, 78, 138), 10764, 2691),
    ("qwen2-vl", (3000, 4000), (2996, 4004), (1, 214, 286), 61204, 15301),
    # §2.1 "Other implementations": HF gives 28x812 and 29 tokens for 10x2000
    ("qwen2-vl", (10, 2000), (28, 812), None, None, 29),
    # §2.1: class-default max_pixels 1,003,520
    ("class-default", (1080, 1920), (728, 1316), None, None, 1222),
    ("class-default", (3000, 4000), (840, 1148), None, None, 1230),
    # §2.2 table (Qwen3-VL checkpoint config)
    ("qwen3-vl", (1, 1), (256, 256), (1, 16, 16), None, 64),
    ("qwen3-vl", (17, 900), (64, 1888), (1, 4, 118), None, 118),
    ("qwen3-vl", (333, 777), (320, 768), (1, 20, 48), None, 240),
    ("qwen3-vl", (1080, 1920), (1088, 1920), (1, 68, 120), None, 2040),
    ("qwen3-vl", (3000, 4000), (3008, 4000), (1, 188, 250), 47000, 11750),
    # §2.1 step 1: max(H, W) / min(H, W) > 200 raises
    ("qwen2-vl", (1, 201), "error", None, None, None),
    ("qwen2-vl", (201, 1), "error", None, None, None),
    ("qwen3-vl", (1, 201), "error", None, None, None),
]


@pytest.mark.parametrize("config,hw,resized,grid,patches,tokens", PEERS_ROWS,
                         ids=[f"{r[0]}-{r[1][0]}x{r[1][1]}" for r in PEERS_ROWS])
def test_peers_rows(golden, config, hw, resized, grid, patches, tokens):
    """PEERS.md values: plan_image gives them, and the golden table holds the same row."""
    c = golden["configs"][config]
    pipe = vlmprep.presets.get(c["preset"], **c["overrides"])
    rows = [r for r in golden["rows"]
            if _key(r["preset"], r.get("overrides"), r["hw"]) == _key(c["preset"], c["overrides"], hw)]
    assert len(rows) == 1, f"{config} {hw}: expected one golden row, found {len(rows)}"
    row = rows[0]
    if resized == "error":
        assert row.get("error") == "aspect_ratio"
        with pytest.raises(ImageError):
            plan_image(pipe, hw)
        return
    p = plan_image(pipe, hw)
    assert _t(p.resized_hw) == resized and tuple(row["resized_hw"]) == resized
    assert p.num_tokens == tokens and row["num_tokens"] == tokens
    if grid is not None:
        assert _t(p.grid_thw) == (grid,) and [tuple(g) for g in row["grid_thw"]] == [grid]
    if patches is not None:
        assert p.num_patches == patches and row["num_patches"] == patches
