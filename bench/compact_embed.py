"""Compact Qwen rows through the vision tower: embedding difference and patch-embedding time.

A real-size Qwen2-VL vision tower (the checkpoints' ``vision_config``: embed_dim 1280, depth 32,
16 heads, mlp_ratio 4, patch 14, temporal_patch_size 2, merge 2; hidden_size 3584 as in the 7B)
with random weights (transformers' own init, seed 0), one thread.

1. Patch embedding at 1080p image geometry (a 1920x1080 photo mosaic through
   ``Processor("qwen2-vl")``: grid 78 x 138 = 10764 patches): the tower's ``Conv3d`` on the full
   rows against the folded embedding ``vit.encode`` runs on compact rows (``adapters._fold``:
   ``F.linear`` with the T weight slices summed, the fold included), both against a float64
   oracle; times, p50 of ``--runs``: the Conv3d as transformers runs it, the same full-row dot
   products as one GEMM (``F.linear``, to separate what the fold saves from what the GEMM
   saves), the folded embedding, and the fold alone (min too: 2 cores shared with other jobs;
   ``--patch-only`` reruns this part alone into an existing JSON).
2. The whole tower (depth 32) on full vs compact rows (``vit.encode``), against the same tower in
   float64, at ``--tower-size`` (default 448x448: 1024 patches; 1080p is 10764 patches, ~15 min
   per pass of the 32 layers on one core, too long here).
Relative differences are normwise: max |a - b| / max |reference|.

    .venv/bin/python bench/compact_embed.py [--json bench/results/compact_embed.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import torch

import vlmprep
from vlmprep.adapters import vit
from vlmprep.adapters._fold import FoldedPatchEmbed, fold_weight
from vlmprep.bench.images import SIZES, mosaic

VISION = dict(depth=32, embed_dim=1280, hidden_size=3584, num_heads=16, mlp_ratio=4, patch_size=14,
              temporal_patch_size=2, spatial_merge_size=2, in_channels=3)


def tower(depth: int, dtype: torch.dtype = torch.float32) -> Any:
    import transformers
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )
    torch.manual_seed(0)
    cfg = transformers.Qwen2VLVisionConfig(**{**VISION, "depth": depth})
    return Qwen2VisionTransformerPretrainedModel(cfg).eval().to(dtype)


def diff(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor) -> dict:
    d = float((a.double() - b.double()).abs().max())
    return {"max_abs": d, "max_rel": d / float(ref.abs().max())}


def times_ms(fn, runs: int) -> list[float]:
    fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(1000 * (time.perf_counter() - t0))
    return ts


def patch_embedding(runs: int) -> dict:
    img = mosaic(SIZES["1080p"], seed=0)
    full = vlmprep.Processor("qwen2-vl")([img])
    compact = vlmprep.Processor("qwen2-vl", row_form="compact")([img])
    assert torch.equal(compact.full_rows(), full.pixel_values)  # the contract, checked here too
    pe = tower(depth=1).patch_embed
    w = pe.proj.weight
    x, r = full.pixel_values, compact.pixel_values
    with torch.no_grad():
        conv = pe(x)
        folded = FoldedPatchEmbed(pe)(r)
        ref = torch.nn.functional.linear(x.double(), w.double().flatten(1))
        runs_ms = {
            "conv3d_full_ms": times_ms(lambda: pe(x), runs),
            "linear_full_ms": times_ms(lambda: torch.nn.functional.linear(x, w.flatten(1)), runs),
            "folded_compact_ms": times_ms(lambda: FoldedPatchEmbed(pe)(r), runs),
            "fold_weight_ms": times_ms(lambda: fold_weight(pe.proj), runs),
        }
    times = {k: statistics.median(v) for k, v in runs_ms.items()}
    return {
        "geometry": {"image_hw": list(SIZES["1080p"]), "grid_thw": full.grid_thw[0].tolist(),
                     "patches": int(x.shape[0]), "full_row": int(x.shape[1]),
                     "compact_row": int(r.shape[1]),
                     "full_mb": x.numel() * 4 / 1e6, "compact_mb": r.numel() * 4 / 1e6},
        "compact_vs_full": diff(folded, conv, conv),
        "full_vs_float64": diff(conv, ref, ref),
        "compact_vs_float64": diff(folded, ref, ref),
        "max_abs_embedding": float(conv.abs().max()),
        **times,  # p50
        "min_ms": {k: min(v) for k, v in runs_ms.items()},
        "saved_vs_conv3d_ms": times["conv3d_full_ms"] - times["folded_compact_ms"],
        "saved_vs_linear_ms": times["linear_full_ms"] - times["folded_compact_ms"],
        "load_avg_1m_after": os.getloadavg()[0],
    }


def whole_tower(size: int) -> dict:
    img = mosaic((size, size), seed=0)
    full = vlmprep.Processor("qwen2-vl")([img])
    compact = vlmprep.Processor("qwen2-vl", row_form="compact")([img])
    u8 = vlmprep.Processor("qwen2-vl", row_form="compact", dtype="uint8")([img])
    t32 = tower(depth=VISION["depth"])
    with torch.no_grad():
        a = vit.encode(t32, full)[0]
        b = vit.encode(t32, compact)[0]
        c = vit.encode(t32, u8)[0]
        del t32
        t64 = tower(depth=VISION["depth"], dtype=torch.float64)
        ref = vit.encode(t64, _as64(full))[0]
    return {
        "geometry": {"image_hw": [size, size], "grid_thw": full.grid_thw[0].tolist(),
                     "patches": int(full.pixel_values.shape[0]), "embeddings": list(a.shape)},
        "compact_vs_full": diff(b, a, a),
        "full_vs_float64": diff(a, ref, ref),
        "compact_vs_float64": diff(b, ref, ref),
        "uint8_compact_vs_float32_compact": diff(c, b, b),
        "uint8_note": ("uint8 rows are normalized on the device in the PIL order (the reference "
                       "backend's bits); the default torch backend's float32 rows are up to 1 ulp "
                       "from that order (docs/concepts.md), so the two differ by rounding here; "
                       "with backend='reference' they are bit-equal (tests/adapters/test_vit.py)"),
        "max_abs_embedding": float(a.abs().max()),
    }


def _as64(batch: Any) -> Any:
    import dataclasses
    return dataclasses.replace(batch, pixel_values=batch.pixel_values.double())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="bench/results/compact_embed.json")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--tower-size", type=int, default=448)
    ap.add_argument("--patch-only", action="store_true",
                    help="rerun part 1 only and replace it in an existing --json (part 2 kept)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.patch_only:
        with open(args.json) as f:
            old = json.load(f)
        old["patch_embedding_1080p"] = patch_embedding(args.runs)
        old["runs"] = args.runs
        print(json.dumps(old["patch_embedding_1080p"], indent=1))
        with open(args.json, "w") as f:
            json.dump(old, f, indent=1)
            f.write("\n")
        return
    out = {
        "what": "compact Qwen2-VL rows through the vision tower (bench/compact_embed.py)",
        "tower": {**VISION, "weights": "random (transformers init, torch.manual_seed(0))"},
        "threads": torch.get_num_threads(), "runs": args.runs,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_avg_1m_start": os.getloadavg()[0]},
        "versions": {"torch": torch.__version__, "vlmprep": vlmprep.__version__},
        "patch_embedding_1080p": patch_embedding(args.runs),
    }
    print(json.dumps(out["patch_embedding_1080p"], indent=1))
    out["tower"]["note"] = ("relative = max |a - b| / max |reference|; float64 = the same "
                            "weights in float64 on the full rows")
    out["whole_tower"] = whole_tower(args.tower_size)
    out["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(out["whole_tower"], indent=1))
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", args.json)


if __name__ == "__main__":
    main()
