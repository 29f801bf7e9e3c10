"""Regenerate ``tests/data/golden_qwen.json`` with transformers as the oracle (run by hand).

    cd /work/main && .venv/bin/python tests/data/make_golden.py     # needs transformers, ~4 min

Every row is computed by transformers only, never by vlmprep:
  - resized (h, w): ``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize``;
    a ValueError there (aspect ratio > 200) gives an ``"error"`` row;
  - grid_thw / num_patches: ``image_grid_thw`` and ``pixel_values.shape[0]`` of the full
    ``Qwen2VLProcessor`` / ``Qwen3VLProcessor`` run on a real (black) image of that size, checked
    against ``Qwen2VLImageProcessor[Pil].get_number_of_image_patches``;
  - num_tokens: the number of ``<|image_pad|>`` ids the processor put in ``input_ids``, checked
    against ``_get_num_multimodal_tokens``. The processors are built offline with a tiny synthetic
    word-level tokenizer holding the special tokens (no download).
The transformers version is recorded in the file. ``tests/plan/test_golden.py`` reads it.
"""
from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

OUT = Path(__file__).with_name("golden_qwen.json")
IMAGE_TOKEN = "<|image_pad|>"

# name -> (preset, overrides, factor, min_pixels, max_pixels, patch) (values from PEERS.md §2.1/2.2)
CONFIGS = {
    "qwen2-vl": ("qwen2-vl", {}, 28, 3136, 12_845_056, 14),
    "qwen3-vl": ("qwen3-vl", {}, 32, 65_536, 16_777_216, 16),
    "class-default": ("qwen2-vl", {"max_pixels": 1_003_520}, 28, 3136, 1_003_520, 14),
}
PEERS_SIZES = [(1, 1), (17, 900), (900, 17), (333, 777), (1080, 1920), (3000, 4000), (10, 2000)]
MAX_SOURCE_PIXELS = 40_000_000  # keeps the black test images (and the run) small


def build_oracles():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil_mod
    from transformers.models.qwen2_vl import image_processing_qwen2_vl as tv_mod
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tk = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.add_tokens([IMAGE_TOKEN, "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"],
                   special_tokens=True)
    oracles = {}
    for name, (_, _, _factor, lo, hi, patch) in CONFIGS.items():
        kw = dict(size={"shortest_edge": lo, "longest_edge": hi}, patch_size=patch, merge_size=2)
        if name == "qwen3-vl":
            kw.update(image_mean=[0.5] * 3, image_std=[0.5] * 3)
            pcls, vcls = Qwen3VLProcessor, Qwen3VLVideoProcessor
        else:
            pcls, vcls = Qwen2VLProcessor, Qwen2VLVideoProcessor
        pil = pil_mod.Qwen2VLImageProcessorPil(**kw)
        oracles[name] = dict(smart_resize=tv_mod.smart_resize, pil=pil,
                             tv=tv_mod.Qwen2VLImageProcessor(**kw),
                             proc=pcls(image_processor=pil, tokenizer=tok, video_processor=vcls()))
    return oracles


def _around(x: int, f: int) -> list[int]:
    return [v for v in (x - f // 2, x - f // 2 + 1, x + f // 2 - 1, x + f // 2) if v >= 1]


def _exact_floor(h: int, w: int, hi: int, f: int) -> int:
    """floor(h / sqrt(h*w/hi) / f) in exact arithmetic: floor(sqrt(h*hi/w) / f)."""
    return math.isqrt(h * hi // w) // f


def _exact_ceil(h: int, w: int, lo: int, f: int) -> int:
    """ceil(h * sqrt(lo/(h*w)) / f) in exact arithmetic: least k with (k*f)^2 * w >= h*lo."""
    k = math.isqrt(h * lo // w) // f
    while (k * f) ** 2 * w < h * lo:
        k += 1
    return k


def _float_traps(factor: int, lo: int, hi: int, n: int) -> list[tuple[int, int]]:
    """Sizes where transformers' float arithmetic differs from exact arithmetic (the floor or
    ceil branch lands one multiple off), up to n per shape pattern; vlmprep must follow the floats."""
    out: list[tuple[int, int]] = []
    for pattern in (lambda h: h, lambda h: 4 * h, lambda h: 9 * h, lambda h: 2 * h + 1):
        found = 0
        for h in range(1, 9000):
            w = pattern(h)
            rounded = round(h / factor) * round(w / factor) * factor ** 2
            if rounded > hi:
                beta = math.sqrt(h * w / hi)
                got = (math.floor(h / beta / factor), math.floor(w / beta / factor))
                exact = (_exact_floor(h, w, hi, factor), _exact_floor(w, h, hi, factor))
            elif rounded < lo:
                beta = math.sqrt(lo / (h * w))
                got = (math.ceil(h * beta / factor), math.ceil(w * beta / factor))
                exact = (_exact_ceil(h, w, lo, factor), _exact_ceil(w, h, lo, factor))
            else:
                continue
            if got != exact:
                out.append((h, w))
                found += 1
                if found == n:
                    break
    return out


def sizes_for(name: str, rng: random.Random) -> list[tuple[tuple[int, int], str]]:
    _, _, f, lo, hi, _ = CONFIGS[name]
    rows: list[tuple[tuple[int, int], str]] = []

    def add(h: int, w: int, why: str, both: bool = False) -> None:
        for hw in ([(h, w), (w, h)] if both else [(h, w)]):
            if hw[0] >= 1 and hw[1] >= 1 and hw not in [r[0] for r in rows]:
                rows.append((hw, why))

    for hw in PEERS_SIZES:
        add(*hw, "peers")
    if name == "class-default":  # a short list: the max_pixels override, mostly its floor branch
        for h, w in [(1004, 1000), (1002, 1001), (896, 1120), (1008, 994), (1022, 1022),
                     (1023, 1023), (2000, 3000), (800, 1300), (4000, 6000), (7000, 7000)]:
            add(h, w, "max", both=True)
        for (h, w) in _float_traps(f, lo, hi, 1):
            add(h, w, "float")
        for _ in range(8):
            add(rng.randint(1, 8000), rng.randint(1, 8000), "random")
        return rows
    # aspect ratio 200: at (ok), just above (error)
    for short, long in [(1, 200), (1, 201), (2, 400), (2, 401), (3, 600), (3, 601), (40, 8000),
                        (40, 8001), (7, 1401)]:
        add(short, long, "aspect", both=True)
    add(1, 2, "tiny", both=True)
    # tiny sides: round(side / F) is 0 at F/2 and below (round-half-to-even), 1 above
    for s in (1, f // 2 - 1, f // 2, f // 2 + 1, f, 3 * f // 2):
        add(s, s, "tiny")
        add(s, 5 * f, "tiny", both=True)
    # rounding edges k*F + F/2 (+-1): the exact half rounds to the even multiple
    for k in (1, 2, 10, 38):
        for d in (-1, 0, 1):
            add(k * f + f // 2 + d, 1000, "edge")
        add(k * f + f // 2, k * f + f // 2, "edge")
        add(1000, k * f + f // 2, "edge")
    # rounded product at / just over max_pixels: a*b cells of F^2, a*b*F^2 <= max < a*(b+1)*F^2
    cells = hi // f ** 2
    for a in (1, 64, math.isqrt(cells)):
        for b in (cells // a, cells // a + 1):
            for h, w in [(a * f, b * f), (a * f + f // 2 - 1, b * f + f // 2 - 1),
                         (a * f + f // 2, b * f + f // 2), (a * f + f // 2 + 1, b * f + f // 2)]:
                add(h, w, "max")
    # raw h*w around max_pixels
    for h in (1000, 3584, 5000):
        for d in (-1, 0, 1):
            add(h, hi // h + d, "max")
    # rounded product around min_pixels, and h*w around it
    cells_lo = -(-lo // f ** 2)
    for a in (1, 2, math.isqrt(cells_lo)):
        for b in (max(1, cells_lo // a - 1), -(-cells_lo // a)):
            for h, w in [(a * f, b * f), (a * f - f // 2, b * f - f // 2),
                         (a * f - f // 2 + 1, b * f - f // 2 + 1)]:
                add(h, w, "min")
    for h in (10, math.isqrt(lo)):
        for d in (-1, 0, 1):
            add(h, lo // h + d, "min")
    # float-arithmetic traps of the floor / ceil branches
    for h, w in _float_traps(f, lo, hi, 3):
        add(h, w, "float")
    # exact scalings of a max_pixels rectangle (beta exact)
    side = math.isqrt(cells) * f
    for num, den in ((1, 1), (2, 1), (3, 2), (1, 2)):
        add(side * num // den, side * num // den, "exact")
    add(side * 2, side // 2, "exact", both=True)
    # a few fixed random sizes
    for _ in range(8):
        add(rng.randint(1, 8000), rng.randint(1, 8000), "random")
    return rows


def oracle_row(name: str, o: dict, hw: tuple[int, int], why: str) -> dict:
    from PIL import Image

    preset, overrides, f, lo, hi, patch = CONFIGS[name]
    row = {"preset": preset}
    if overrides:
        row["overrides"] = overrides
    row["hw"] = list(hw)
    row["why"] = why
    h, w = hw
    try:
        rh, rw = o["smart_resize"](h, w, f, min_pixels=lo, max_pixels=hi)
    except ValueError as e:
        assert "aspect ratio" in str(e), e
        row["error"] = "aspect_ratio"
        return row
    n_patches = o["pil"].get_number_of_image_patches(h, w, {})
    assert n_patches == o["tv"].get_number_of_image_patches(h, w, {})
    mm = o["proc"]._get_num_multimodal_tokens(image_sizes=[(h, w)])
    n_tokens = mm["num_image_tokens"][0]
    assert mm["num_image_patches"] == [n_patches]
    grid = [1, rh // patch, rw // patch]  # transformers' _preprocess: resized // patch_size
    if h * w <= MAX_SOURCE_PIXELS:  # the real thing, on pixels
        out = o["proc"](text=[f"x {IMAGE_TOKEN} y"], images=[Image.new("RGB", (w, h))],
                        return_tensors="np")
        assert out["image_grid_thw"].tolist() == [grid], (hw, out["image_grid_thw"], grid)
        assert out["pixel_values"].shape == (n_patches, 3 * 2 * patch * patch)
        assert int((out["input_ids"] == o["proc"].image_token_id).sum()) == n_tokens
    assert grid[1] * grid[2] == n_patches
    row.update(resized_hw=[rh, rw], grid_thw=[grid], num_patches=n_patches, num_tokens=n_tokens)
    return row


def main() -> None:
    import transformers

    t0 = time.time()
    oracles = build_oracles()
    rng = random.Random(20240601)  # fixed: the table is stable across reruns
    rows = []
    for name in CONFIGS:
        for hw, why in sizes_for(name, rng):
            rows.append(oracle_row(name, oracles[name], hw, why))
    doc = {
        "about": "Qwen2-VL / Qwen3-VL geometry from transformers (the oracle); regenerate with "
                 "tests/data/make_golden.py; read by tests/plan/test_golden.py",
        "transformers": transformers.__version__,
        "checked_on_pixels": f"every non-error row with h*w <= {MAX_SOURCE_PIXELS:,}",
        "configs": {k: {"preset": v[0], "overrides": v[1], "factor": v[2], "min_pixels": v[3],
                        "max_pixels": v[4], "patch_size": v[5]} for k, v in CONFIGS.items()},
        "rows": rows,
    }
    text = json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1)[:-2]
    text += ',\n "rows": [\n' + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]\n}\n"
    json.loads(text)  # well-formed
    OUT.write_text(text, encoding="utf-8")
    n_err = sum("error" in r for r in rows)
    print(f"wrote {OUT} ({len(rows)} rows, {n_err} errors, {len(text)} bytes, transformers "
          f"{transformers.__version__}) in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
