"""Regenerate ``tests/data/golden_families.json`` with transformers as the oracle (run by hand).

    cd /work/main && .venv/bin/python tests/data/make_golden_families.py   # needs transformers

Every value is computed by transformers only, never by vlmprep. For each preset (the ten
non-Qwen families; Qwen is in golden_qwen.json) and each source size (H, W), the PIL-backend image
processor built from ``vlmprep/presets/checkpoints/<preset>.json`` (``tests/hfref.py``,
``hf_processor(preset, "pil")``) is run on a real black uint8 image of that size
(``input_data_format="channels_last"``: without it transformers guesses the channel axis of 1- or
3-pixel-wide images and may misread them; where the guessing call gives another ``pixel_values``
shape the row records it as ``default_pv``), and the row keeps its output geometry, compactly:

  - ``pv``: ``pixel_values.shape``;
  - ``tiles``: the sizes of the tile images in ``pixel_values`` in order, run-length coded as
    ``[h, w, count]`` (for idefics3 the valid region of each tile per ``pixel_attention_mask``;
    for siglip2 omitted, see ``valid``);
  - family fields as the processor returns them: ``image_sizes`` (llava-next, llava-onevision,
    pixtral), ``num_patches`` (internvl), ``aspect_ratio_ids`` / ``aspect_ratio_mask`` /
    ``num_tiles`` (mllama), ``rows`` / ``cols`` (idefics3, ``return_row_col_info``),
    ``spatial_shapes`` and ``valid`` (siglip2: the sum of ``pixel_attention_mask``), ``num_crops``
    (gemma3);
  - ``resized`` for llava-1.5: transformers' ``get_resize_output_image_size(...,
    default_to_square=False)`` (the image before its center crop);
  - ``tokens``: the family processor's ``_get_num_multimodal_tokens(...)["num_image_tokens"]``
    (bound to a minimal stand-in or a processor with a synthetic tokenizer, no download) where the
    family has one, else API.md's count (mllama 1, siglip the patch count, siglip2 the valid
    patch count);
  - ``prompt_tokens`` (pixtral): the ``[IMG]``/``[IMG_BREAK]``/``[IMG_END]`` count of the prompt
    ``PixtralProcessor.replace_image_token`` writes for the output's ``image_sizes``. It differs
    from ``tokens`` for heights 1 and 3: ``_get_num_multimodal_tokens`` probes
    ``np.zeros((h, w, 3))``, which transformers then reads as channels-first;
  - ``error``: the exception's type name, where transformers fails on the size (the row has no
    other fields).
The transformers version is recorded in the file. ``tests/families/test_golden_families.py``
reads it.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for hfref

from hfref import hf_processor  # noqa: E402

OUT = HERE / "golden_families.json"
PRESETS = ["siglip", "llava-1.5", "internvl", "llava-next", "llava-onevision", "mllama",
           "idefics3", "pixtral", "siglip2-naflex", "gemma3"]

COMMON = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 1500), (1500, 1), (3, 1400), (1400, 3),
          (17, 900), (900, 17), (333, 777), (777, 333), (480, 640), (1080, 1440), (1500, 1500)]
# sizes around each family's thresholds (tile / target sides, ratio switches, budgets)
EDGES = {
    "siglip": [(383, 385), (384, 384), (14, 14)],
    "llava-1.5": [(335, 337), (336, 336), (336, 1000), (1000, 336), (337, 335), (1, 337),
                  (673, 1345), (100, 101)],
    "internvl": [(448, 448), (447, 449), (448, 896), (896, 448), (448, 5 * 448), (10, 1200),
                 (449, 1345), (896, 1343), (224, 2688), (2688, 224)],
    "llava-next": [(336, 336), (336, 672), (672, 336), (335, 673), (336, 1008), (1008, 336),
                   (337, 1007), (672, 672), (671, 673), (500, 1500)],
    "llava-onevision": [(384, 384), (383, 385), (384, 768), (768, 384), (384, 1152), (1152, 1152),
                        (384, 1500), (1500, 384), (1151, 1153), (700, 1300)],
    "mllama": [(560, 560), (559, 561), (560, 1120), (1120, 560), (561, 1121), (560, 2240),
               (1120, 1120), (1121, 1119), (280, 1500), (10, 560)],
    "idefics3": [(364, 364), (365, 365), (364, 365), (1, 364), (1, 365), (728, 729),
                 (1092, 1093), (46, 1000), (49, 1000), (23, 1400)],
    "pixtral": [(16, 16), (15, 17), (17, 15), (1024, 1024), (1025, 1023), (1024, 1025),
                (1, 64), (2, 512), (8, 1024), (15, 1500)],
    "siglip2-naflex": [(256, 256), (255, 257), (16, 4096 // 4), (1, 1000), (1000, 1), (7, 1),
                       (16, 16), (17, 17), (512, 512), (100, 1400)],
    "gemma3": [(896, 896), (895, 897), (256, 512), (512, 256), (300, 1300), (1300, 300),
               (500, 590), (500, 610), (257, 1030), (100, 120)],
}


def sizes_for(preset: str, rng: random.Random) -> list[list[int]]:
    out: list[list[int]] = []
    for hw in COMMON + EDGES[preset] + [(rng.randint(1, 1500), rng.randint(1, 1500))
                                        for _ in range(8)]:
        if list(hw) not in out:
            out.append(list(hw))
    return out


def _tok():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.add_tokens(["<image>", "<video>"], special_tokens=True)
    return tok


def token_oracles() -> dict:
    """preset -> f((h, w)) -> num_image_tokens, from the family processors' own methods."""
    import transformers as T
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor
    merge = lambda **kw: {"images_kwargs": {}}  # noqa: E731

    def unbound(cls, **attrs):
        fake = SimpleNamespace(_merge_kwargs=merge, **attrs)
        return lambda hw: cls._get_num_multimodal_tokens(fake, image_sizes=[hw])[
            "num_image_tokens"][0]

    tok = _tok()
    nxt = T.LlavaNextProcessor(image_processor=hf_processor("llava-next", "pil"), tokenizer=tok,
                               patch_size=14, vision_feature_select_strategy="default",
                               num_additional_image_tokens=1)
    ov = T.LlavaOnevisionProcessor(image_processor=hf_processor("llava-onevision", "pil"),
                                   tokenizer=tok, video_processor=LlavaOnevisionVideoProcessor(),
                                   num_image_tokens=729, vision_feature_select_strategy="full",
                                   vision_aspect_ratio="anyres_max_9")

    class NL:  # keeps "\n\n" as one token, as the Llama 3 / SmolLM2 tokenizers do
        def __call__(self, text, add_special_tokens=False):
            assert text == "\n\n"
            return {"input_ids": [271]}

    return {
        "siglip": lambda hw: (384 // 14) ** 2,  # API.md: the patch count
        "llava-1.5": unbound(T.LlavaProcessor, image_processor=hf_processor("llava-1.5", "pil"),
                             patch_size=14, num_additional_image_tokens=1,
                             vision_feature_select_strategy="default"),
        "internvl": unbound(T.InternVLProcessor, image_processor=hf_processor("internvl", "pil"),
                            image_seq_length=256),
        "llava-next": lambda hw: nxt._get_num_multimodal_tokens(image_sizes=[hw])[
            "num_image_tokens"][0],
        "llava-onevision": lambda hw: ov._get_num_multimodal_tokens(image_sizes=[hw])[
            "num_image_tokens"][0],
        "mllama": lambda hw: 1,  # API.md
        "idefics3": unbound(T.Idefics3Processor, image_processor=hf_processor("idefics3", "pil"),
                            image_seq_len=169, tokenizer=NL()),
        "pixtral": unbound(T.PixtralProcessor, image_processor=hf_processor("pixtral", "pil"),
                           patch_size=16, spatial_merge_size=1),
        "siglip2-naflex": None,  # API.md: the valid patch count, read from the output
        "gemma3": unbound(T.Gemma3Processor, image_seq_length=256),
    }


def _runs(tiles: list) -> list[list[int]]:
    """[[h, w], [h, w], ...] -> [[h, w, count], ...] over consecutive equal sizes."""
    out: list[list[int]] = []
    for t in tiles:
        if out and out[-1][:2] == list(t):
            out[-1][2] += 1
        else:
            out.append([int(t[0]), int(t[1]), 1])
    return out


def _valid_hw(mask: np.ndarray) -> list[int]:
    return [int(mask.any(axis=1).sum()), int(mask.any(axis=0).sum())]


def oracle_row(preset: str, hw: list[int], tokens) -> dict:
    from PIL import Image
    h, w = hw
    row: dict = {"preset": preset, "hw": hw}
    proc = hf_processor(preset, "pil")
    kw = {"return_row_col_info": True} if preset == "idefics3" else {}
    img = Image.new("RGB", (w, h))
    try:
        out = proc([img], return_tensors="np", input_data_format="channels_last", **kw)
    except Exception as e:  # noqa: BLE001 - recorded, and checked by the test
        row["error"] = type(e).__name__
        return row
    if 1 in hw or 3 in hw:  # transformers' channel guess may misread the image: note it
        try:
            d = proc([img], return_tensors="np", **kw)["pixel_values"]
            if np.asarray(d).shape != np.asarray(out["pixel_values"]).shape:
                row["default_pv"] = list(np.asarray(d).shape)
        except Exception as e:  # noqa: BLE001
            row["default_pv"] = type(e).__name__
    out = {k: np.asarray(v) for k, v in out.items()}
    pv = out["pixel_values"]
    row["pv"] = list(pv.shape)
    if preset in ("siglip", "llava-1.5", "gemma3", "internvl", "pixtral"):
        row["tiles"] = [list(pv.shape[-2:])] * (pv.shape[0] if preset == "internvl" else 1)
    elif preset in ("llava-next", "llava-onevision"):
        row["tiles"] = [list(pv.shape[-2:])] * pv.shape[1]
    elif preset == "mllama":
        n = int(out["num_tiles"].reshape(-1)[0])
        row["tiles"] = [list(pv.shape[-2:])] * n
    elif preset == "idefics3":
        m = out["pixel_attention_mask"][0]
        row["tiles"] = [_valid_hw(t) for t in m]
    if "tiles" in row:
        row["tiles"] = _runs(row["tiles"])
    for k in ("image_sizes", "num_patches", "aspect_ratio_ids", "aspect_ratio_mask", "num_tiles",
              "rows", "cols", "spatial_shapes", "num_crops"):
        if k in out:
            row[k] = out[k].tolist()
    if preset == "siglip2-naflex":
        row["valid"] = int(out["pixel_attention_mask"].sum())
    if preset == "llava-1.5":
        from transformers.image_transforms import get_resize_output_image_size
        fake = np.broadcast_to(np.zeros((), np.uint8), (h, w, 3))
        row["resized"] = list(get_resize_output_image_size(
            fake, 336, default_to_square=False, input_data_format="channels_last"))
    row["tokens"] = int(row["valid"] if tokens is None else tokens(tuple(hw)))
    if preset == "pixtral":  # the prompt PixtralProcessor writes for the output's image_sizes
        from transformers import PixtralProcessor
        fake = SimpleNamespace(patch_size=16, spatial_merge_size=1, image_token="[IMG]",
                               image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")
        s = PixtralProcessor.replace_image_token(
            fake, {"image_sizes": [tuple(out["image_sizes"][0])]}, 0)
        row["prompt_tokens"] = s.count("[IMG")
    return row


def main() -> None:
    import transformers
    t0 = time.time()
    rng = random.Random(20240602)  # fixed: the table is stable across reruns
    toks = token_oracles()
    rows = []
    for preset in PRESETS:
        t1 = time.time()
        for hw in sizes_for(preset, rng):
            rows.append(oracle_row(preset, hw, toks[preset]))
        print(f"{preset}: {time.time() - t1:.1f} s", file=sys.stderr)
    doc = {
        "about": "non-Qwen family geometry and token counts from transformers (the oracle, PIL "
                 "backend, tests/hfref.py processors); regenerate with "
                 "tests/data/make_golden_families.py; read by tests/families/"
                 "test_golden_families.py",
        "transformers": transformers.__version__,
        "presets": PRESETS,
    }
    write_table(OUT, doc, rows, t0)


def write_table(out: Path, doc: dict, rows: list[dict], t0: float) -> None:
    """``doc`` with ``rows`` (one JSON line each, for readable diffs) to ``out``; a summary line."""
    text = json.dumps(doc, indent=1)[:-2]
    text += ',\n "rows": [\n' + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]\n}\n"
    json.loads(text)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(rows)} rows, {sum('error' in r for r in rows)} errors, "
          f"{len(text)} bytes, transformers {doc['transformers']}) in "
          f"{time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
