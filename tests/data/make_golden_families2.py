"""Regenerate ``tests/data/golden_families2.json`` with transformers as the oracle (run by hand).

    cd /work/main && .venv/bin/python tests/data/make_golden_families2.py   # needs transformers

The six families added in issue 30 (``llama4``, ``glm4v``, ``minicpm-v``, ``phi4-multimodal``,
``ovis2``, ``lfm2-vl``), as ``make_golden_families.py`` does the ten older ones. Every value is
computed by transformers only, never by vlmprep. For each preset and source size (H, W), the
image processor built from ``vlmprep/presets/checkpoints/<preset>.json`` (``tests/hfref.py``): the
PIL-backend class where transformers has one (glm4v, minicpm-v, ovis2), else the torchvision
class (llama4, phi4-multimodal, lfm2-vl) is run on a black uint8 HWC array of that size
(``input_data_format="channels_last"``; where transformers' own channel guess on a PIL image of a
1- or 3-pixel side gives another pixel shape, the row records it as ``default_pv``). Then the
family's Processor (a word-level stand-in tokenizer holding the family's special tokens,
``hfref.tiny_tokenizer``; no download) writes the image's prompt replacement with its own
``replace_image_token`` on that output, as its ``__call__`` does. A row keeps, compactly:

  - ``pv``: the shape of the pixel output (``pixel_values``; phi4: ``image_pixel_values``);
  - family fields as the image processor returns them: ``aspect_ratios`` (llama4),
    ``image_grid_thw`` (glm4v), ``target_sizes`` run-length coded ``[h, w, count]``, ``grids``,
    ``num_patches_per_image`` (minicpm-v), ``image_sizes``, ``num_img_tokens`` and ``mask``
    (phi4: the sums of ``image_attention_mask`` per crop, run-length coded ``[sum, count]``),
    ``grids`` (ovis2), ``spatial_shapes`` (runs), ``mask`` (per-tile sums of
    ``pixel_attention_mask``, runs), ``mask_len`` (its padded length), ``image_rows`` /
    ``image_cols`` / ``image_sizes`` (lfm2-vl, ``return_row_col_info`` as its Processor forces);
  - ``tokens``: the replacement's token count under the stand-in tokenizer (each special token
    one token, minicpm-v's row newline one token), ``embeddings``: how many of them are the
    image token the vision embeddings fill, ``placeholder``: the first 16 hex digits of the
    replacement's SHA-1. minicpm-v: without the ``<image_id>k</image_id>`` prefix its Processor
    adds per image of a sample (``replace_image_token``'s string);
  - ``mm_tokens`` / ``mm_patches`` (glm4v, the one with the count API):
    ``Glm4vProcessor._get_num_multimodal_tokens`` for the size (header only);
  - ``error``: the exception's type name, where transformers fails on the size (the row has no
    other fields).

Sizes: ``COMMON`` (tiny, 1x1500 / 1500x1, thin, photos, 13377x13377: the largest square vlmprep
accepts by default, 178,956,970 source pixels), per family the thresholds of its rule and their
neighbours (``EDGES``), and 20 random sizes (fixed seed). The transformers version is recorded in
the file. ``tests/families/test_golden_families2.py`` reads it.
"""
from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for hfref

from hfref import hf_processor, tiny_tokenizer  # noqa: E402
from make_golden_families import _runs, write_table  # noqa: E402

OUT = HERE / "golden_families2.json"
PRESETS = ["llama4", "glm4v", "minicpm-v", "phi4-multimodal", "ovis2", "lfm2-vl"]
#: the oracle's backend: PIL where transformers 5.24 has the class (FAMILIES2.md)
BACKEND = {"llama4": "torchvision", "glm4v": "pil", "minicpm-v": "pil",
           "phi4-multimodal": "torchvision", "ovis2": "pil", "lfm2-vl": "torchvision"}

COMMON = [(1, 1), (1, 2), (2, 1), (3, 3), (1, 1500), (1500, 1), (3, 1400), (1400, 3), (17, 900),
          (900, 17), (480, 640), (1080, 1920), (1920, 1080), (1500, 1500), (13377, 13377)]


def _around(hw_list, deltas=((-1, -1), (0, 0), (0, 1), (1, 0), (1, 1))):
    return [(h + a, w + b) for h, w in hw_list for a, b in deltas if h + a > 0 and w + b > 0]


L4 = 336  # llama4 tile: canvases of <= 16 tiles (find_supported_resolutions), each +- 1
M = 448  # minicpm-v scale_resolution; phi4 / ovis2 tile
EDGES = {
    "llama4": _around([(L4 * r, L4 * c) for r, c in ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3),
                                                     (3, 5), (4, 4), (2, 8), (8, 2), (1, 16),
                                                     (16, 1), (3, 4))])
    + [(168, 168), (169, 169), (1, 5376), (1, 5377), (5377, 1), (1, 13377), (13377, 1)],
    # factor 28; budget 2*h*w in 12,544..9,633,792 (on the sides rounded to 28, half to even);
    # aspect 200 after a side below 28 is scaled up to 28
    "glm4v": [(13, 27), (27, 27), (28, 28), (29, 29), (1, 200), (200, 1), (1, 201), (201, 1),
              (27, 5400), (27, 5401), (28, 5600), (28, 5601), (100, 20000), (100, 20001),
              (56, 84), (56, 111), (56, 112), (55, 112), (79, 79), (80, 80), (2184, 2184),
              (2185, 2185), (2184, 2197), (2184, 2198), (2184, 2199), (2212, 2184), (2194, 2195),
              (2196, 2196), (1092, 4410), (4410, 1092), (3000, 4000)],
    # slices: multiple = min(ceil(H*W / 448^2), 9); sides rounded to 56
    "minicpm-v": _around([(M, M), (M, 2 * M), (2 * M, M), (2 * M, 2 * M), (M, 3 * M),
                          (3 * M, 3 * M)], ((-1, -1), (0, 0), (0, 1), (1, 1)))
    + [(447, 449), (1344, 1345), (27, 28), (55, 56), (56, 57), (223, 224), (2000, 60),
       (5000, 3), (1, 200704), (1, 200705), (200705, 1)],
    # crops ceil(W/448) x ceil(H/448) <= 36, else the closest ratio; padding >= 14 masks a patch
    # row / column; a resized side under 10 pixels is refused
    "phi4-multimodal": _around([(M, M), (2 * M, 3 * M), (6 * M, 6 * M), (M, 36 * M)],
                               ((-1, -1), (0, 0), (0, 1), (1, 0), (1, 1)))
    + [(434, 448), (435, 448), (448, 434), (448, 435), (420, 448), (421, 448), (9, 448),
       (10, 448), (448, 9), (448, 10), (11, 900), (900, 11), (1, 150), (150, 1), (50, 16128),
       (16128, 50), (100, 20000), (3000, 2000), (60, 4000)],
    # the covering grid: more than 90 % covered (448 / 497.7), up to 12 tiles; its transpose
    "ovis2": _around([(M, M), (M, 2 * M), (2 * M, M), (2 * M, 2 * M), (3 * M, 3 * M)],
                     ((-1, -1), (0, 0), (0, 1), (1, 1)))
    + [(497, 497), (498, 498), (448, 497), (448, 498), (224, 224), (12, 5376), (13, 5377),
       (3, 5000), (5000, 3), (1344, 1792), (1792, 1344), (1, 5376)],
    # sides rounded to 32 (x16 +- 1); smart resize 256^2..512^2; split above 512^2 * 1.5
    # (~627^2); 1024 rows per sequence (1 x 1024 fits, 1 x 1100 does not)
    "lfm2-vl": [(15, 15), (16, 16), (17, 17), (47, 48), (48, 48), (49, 49), (255, 255),
                (256, 256), (257, 257), (511, 511), (512, 512), (513, 513), (607, 607),
                (608, 608), (624, 624), (625, 625), (626, 627), (627, 627), (640, 640),
                (1023, 1023), (1024, 1024), (1025, 1025), (1000, 1000), (2000, 2000),
                (1, 1000), (1, 1024), (1, 1100), (1100, 1), (3, 1100), (40, 4000), (200, 8000),
                (5120, 512)],
}


def sizes_for(preset: str, rng: random.Random) -> list[list[int]]:
    rand = [(rng.randint(1, 4000), rng.randint(1, 4000)) for _ in range(16)]
    rand += [(rng.randint(1, 64), rng.randint(1, 64)) for _ in range(4)]
    out: list[list[int]] = []
    for hw in COMMON + EDGES[preset] + rand:
        if list(hw) not in out:
            out.append(list(hw))
    return out


# -- the family Processors (replace_image_token), with stand-in tokenizers ------------------------
LLAMA4 = ["<|image|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
          "<|tile_y_separator|>"]
GLM4V = ["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>",
         "<|begin_of_video|>", "<|end_of_video|>"]
MINICPM = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
           "image_start_token": "<image>", "image_end_token": "</image>",
           "slice_start_token": "<slice>", "slice_end_token": "</slice>",
           "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}
OVIS2 = ["<image>", "<IMG_ATOM>", "<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>",
         "<IMG_END>"]
LFM2 = ["<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"] + [
    f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)]


def processors() -> dict:
    """preset -> (Processor, image token, replace_image_token kwargs)."""
    import transformers as T

    from vlmprep import presets
    ip = {p: hf_processor(p, BACKEND[p]) for p in PRESETS}
    glm_video = T.Glm4vVideoProcessor.from_dict(presets.glm4v.video_configs()["glm4v"])
    return {
        "llama4": (T.Llama4Processor(image_processor=ip["llama4"],
                                     tokenizer=tiny_tokenizer(LLAMA4)), "<|patch|>", {}),
        "glm4v": (T.Glm4vProcessor(image_processor=ip["glm4v"], tokenizer=tiny_tokenizer(GLM4V),
                                   video_processor=glm_video), "<|image|>", {}),
        # the row newline: one token (as in the checkpoint's BPE), an added token here
        "minicpm-v": (T.MiniCPMV4_6Processor(
            image_processor=ip["minicpm-v"], video_processor=T.MiniCPMV4_6VideoProcessor(),
            tokenizer=tiny_tokenizer(("\n",), extra=MINICPM)), "<|image_pad|>",
            {"image_token_divisor": 16}),
        "phi4-multimodal": (T.Phi4MultimodalProcessor(
            image_processor=ip["phi4-multimodal"],
            audio_processor=T.Phi4MultimodalFeatureExtractor(),
            tokenizer=tiny_tokenizer(extra={"image_token": "<|endoftext10|>",
                                            "audio_token": "<|endoftext11|>"})),
            "<|endoftext10|>", {}),
        "ovis2": (T.Ovis2Processor(image_processor=ip["ovis2"], tokenizer=tiny_tokenizer(OVIS2),
                                   image_seq_length=256), "<IMG_ATOM>", {}),
        "lfm2-vl": (T.Lfm2VlProcessor(image_processor=ip["lfm2-vl"],
                                      tokenizer=tiny_tokenizer(LFM2)), "<image>",
                    {"use_image_special_tokens": True}),
    }


# -- rows ------------------------------------------------------------------------------------------
def _rle(values) -> list[list[int]]:
    """[a, a, b] -> [[a, 2], [b, 1]]."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == int(v):
            out[-1][1] += 1
        else:
            out.append([int(v), 1])
    return out


def _list(v):
    import torch
    if isinstance(v, torch.Tensor):
        return v.tolist()
    return np.asarray(v).tolist()


def _pv_key(preset: str) -> str:
    return "image_pixel_values" if preset == "phi4-multimodal" else "pixel_values"


def oracle_row(preset: str, hw: list[int], proc, token: str, rep_kw: dict) -> dict:
    from PIL import Image
    h, w = hw
    row: dict = {"preset": preset, "hw": hw}
    ip = proc.image_processor
    kw = {"return_row_col_info": True} if preset == "lfm2-vl" else {}  # Lfm2VlProcessor's
    arr = np.zeros((h, w, 3), np.uint8)
    try:
        out = ip([arr], return_tensors="pt", input_data_format="channels_last", **kw)
        text = proc.replace_image_token(out, 0, **rep_kw)
    except Exception as e:  # noqa: BLE001 - recorded, and checked by the test
        row["error"] = type(e).__name__
        return row
    pv = tuple(out[_pv_key(preset)].shape)
    if 1 in hw or 3 in hw:  # transformers' channel guess on a PIL image: note a different shape
        try:
            d = ip([Image.fromarray(arr)], return_tensors="pt", **kw)[_pv_key(preset)]
            if tuple(d.shape) != pv:
                row["default_pv"] = list(d.shape)
        except Exception as e:  # noqa: BLE001
            row["default_pv"] = type(e).__name__
    row["pv"] = list(pv)
    if preset == "llama4":
        row["aspect_ratios"] = _list(out["aspect_ratios"])
    elif preset == "glm4v":
        row["image_grid_thw"] = _list(out["image_grid_thw"])
    elif preset == "minicpm-v":
        row["target_sizes"] = _runs(_list(out["target_sizes"]))
        row["grids"] = _list(out["grids"])
        row["num_patches_per_image"] = _list(out["num_patches_per_image"])
    elif preset == "phi4-multimodal":
        row["image_sizes"] = _list(out["image_sizes"])
        row["num_img_tokens"] = _list(out["num_img_tokens"])
        row["mask"] = _rle(out["image_attention_mask"][0].sum(dim=(-1, -2)).long().tolist())
    elif preset == "ovis2":
        row["grids"] = _list(out["grids"])
    elif preset == "lfm2-vl":
        row["spatial_shapes"] = _runs(_list(out["spatial_shapes"]))
        m = out["pixel_attention_mask"]
        row["mask"] = _rle(m.sum(dim=-1).tolist())
        row["mask_len"] = int(m.shape[-1])
        for k in ("image_rows", "image_cols", "image_sizes"):
            row[k] = _list(out[k])
    ids = proc.tokenizer(text, add_special_tokens=False)["input_ids"]
    row["tokens"] = len(ids)
    row["embeddings"] = ids.count(proc.tokenizer.convert_tokens_to_ids(token))
    row["placeholder"] = hashlib.sha1(text.encode()).hexdigest()[:16]
    if preset == "glm4v":
        mm = proc._get_num_multimodal_tokens(image_sizes=[hw])
        row["mm_tokens"], row["mm_patches"] = mm["num_image_tokens"][0], mm["num_image_patches"][0]
    return row


def main() -> None:
    import transformers
    t0 = time.time()
    rng = random.Random(20250630)  # fixed: the table is stable across reruns
    procs = processors()
    rows = []
    for preset in PRESETS:
        t1 = time.time()
        proc, token, rep_kw = procs[preset]
        for hw in sizes_for(preset, rng):
            rows.append(oracle_row(preset, hw, proc, token, rep_kw))
        print(f"{preset}: {time.time() - t1:.1f} s", file=sys.stderr)
    doc = {
        "about": "llama4 / glm4v / minicpm-v / phi4-multimodal / ovis2 / lfm2-vl geometry and "
                 "token counts from transformers (the oracle: the PIL image processor where the "
                 "family has one, else torchvision; tests/hfref.py processors); regenerate with "
                 "tests/data/make_golden_families2.py; read by tests/families/"
                 "test_golden_families2.py",
        "transformers": transformers.__version__,
        "presets": PRESETS,
        "backends": BACKEND,
    }
    write_table(OUT, doc, rows, t0)


if __name__ == "__main__":
    main()
