"""Every non-Qwen family against transformers' TORCHVISION-backend processor (the family issue:
"pixel parity against BOTH transformers backends on real photos of odd sizes").

The families' own tests compare with the PIL backend (the oracle). Here vlmprep's ``dtype="uint8"``
output, in the family's ``to_hf`` form, is compared with the torchvision-backend processor run
with ``do_rescale=False, do_normalize=False`` on the same photos, valid (unpadded) pixels only.

Bound, as tests/backends/test_parity_hf.py justifies it: max 24, mean 0.5 levels. transformers'
torchvision backend always resizes horizontal-first while Pillow 13 goes vertical-first for some
shapes (8-24 level errors near edges), and on CUDA / old torchvision it swaps LANCZOS for bicubic
(not here: torchvision >= 0.21 on CPU has native LANCZOS). Geometry (shapes, sizes, masks, tile
counts) must agree exactly.

Raw outputs of the torchvision backend: uint8 for every family except mllama and idefics3, which
return float32 holding unscaled 0..255 values (their PIL backends: mllama float32, idefics3
uint8); those are compared as floats in level units directly (no rescale, so 1 level = 1.0).
"""
from __future__ import annotations

import pytest
import torch
from _support import figures
from _support.imgdata import crop, tiled
from hfref import CONFIGS, hf_outputs

import vlmprep

pytestmark = pytest.mark.hf

BOUND = (24, 0.5)

# A small mixed batch of real photos of odd sizes per family: an upscale, a downscale and (where
# the family resizes both ways) a shape that shrinks one side and grows the other.
BATCHES = {
    "siglip": [crop("astronaut", 301, 453), crop("hopper", 477, 389), tiled("rocket", 331, 710)],
    "llava-1.5": [crop("astronaut", 301, 453), crop("hopper", 477, 389),
                  tiled("rocket", 331, 710)],
    "internvl": [crop("chelsea", 299, 451), crop("hopper", 477, 389)],
    "llava-next": [crop("astronaut", 301, 453), crop("hopper", 477, 389),
                   tiled("rocket", 331, 1010)],
    "llava-onevision": [crop("astronaut", 301, 453), crop("coffee", 399, 37),
                        tiled("rocket", 331, 1010)],
    "mllama": [crop("astronaut", 301, 453), crop("hopper", 477, 389), tiled("rocket", 610, 1190)],
    "idefics3": [crop("chelsea", 299, 451), crop("coffee", 399, 137)],
    "pixtral": [crop("astronaut", 301, 453), crop("hopper", 477, 389),
                tiled("rocket", 1010, 1390)],
    "siglip2-naflex": [crop("astronaut", 301, 453), crop("chelsea", 17, 451),
                       tiled("rocket", 1010, 1390)],
    "gemma3": [crop("astronaut", 301, 453), crop("hopper", 477, 389), tiled("rocket", 290, 1010)],
}
PRESETS = list(BATCHES)


def _levels(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    assert a.shape == b.shape, (a.shape, b.shape)
    d = (a.to(torch.float64) - b.to(torch.float64)).abs()
    return float(d.max()), float(d.mean())


def _valid(preset: str, pv: torch.Tensor, want: dict, ntiles: list) -> torch.Tensor:
    """The valid (non-padding) pixels of a to_hf-form tensor, selected by the TORCHVISION output's
    geometry keys (which are first asserted equal to ours), flattened."""
    if preset == "pixtral":  # (B, C, Hmax, Wmax), each image top-left
        return torch.cat([pv[i, :, :h, :w].reshape(-1)
                          for i, (h, w) in enumerate(want["image_sizes"].tolist())])
    if preset == "siglip2-naflex":  # (B, L, D) rows, mask over L
        return pv[want["pixel_attention_mask"].bool()].reshape(-1)
    if preset == "idefics3":  # (1, N, C, H, W), mask over (N, H, W); padded tiles all-False
        m = want["pixel_attention_mask"].bool().unsqueeze(2).expand_as(pv)
        return pv[m]
    if preset == "mllama":  # (1, B, T, C, H, W): real tiles only
        return torch.cat([pv[s, j, :n].reshape(-1) for s, row in enumerate(want["num_tiles"])
                          for j, n in enumerate(row)])
    if preset in ("llava-next", "llava-onevision"):  # (B, Nmax, C, H, W): real crops only
        return torch.cat([pv[i, :k].reshape(-1) for i, k in enumerate(ntiles)])
    return pv.reshape(-1)  # fixed shape, no padding (siglip, llava-1.5, internvl, gemma3)


@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("preset", PRESETS)
def test_uint8_matches_hf_torchvision_backend(preset, backend):
    from PIL import Image
    arrs = BATCHES[preset]
    proc = vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"),
                                             backend=backend, dtype="uint8")
    ntiles = [len(p.tiles) for p in proc.plan(arrs).images]
    hf = proc(arrs).to_hf()
    assert hf["pixel_values"].dtype == torch.uint8
    want = hf_outputs(preset, "torchvision", [Image.fromarray(a) for a in arrs], raw=True)
    want_pv = torch.as_tensor(want["pixel_values"])
    # Structure: same keys; geometry keys equal; pixel tensor of the same shape.
    assert set(hf) == set(want), (set(hf), set(want))
    for k in want:
        if k != "pixel_values":
            if isinstance(want[k], torch.Tensor):
                assert torch.equal(torch.as_tensor(hf[k]), want[k]), k
            else:
                assert hf[k] == want[k], k
    assert hf["pixel_values"].shape == want_pv.shape
    if want_pv.dtype != torch.uint8:  # mllama, idefics3: float32 holding raw 0..255
        assert want_pv.dtype == torch.float32 and float(want_pv.max()) > 1.5
        assert float(want_pv.min()) >= 0 and float(want_pv.max()) <= 255
    mx, mean = _levels(_valid(preset, hf["pixel_values"], want, ntiles),
                       _valid(preset, want_pv, want, ntiles))
    # The whole tensor, padding included: both pad with the same values (measured: equal).
    pmx, _ = _levels(hf["pixel_values"], want_pv)
    figures.record("families vs transformers' torchvision backend, levels",
                   f"{preset}/{backend}: max {mx:.0f} mean {mean:.4f} (whole tensor incl. padding "
                   f"max {pmx:.0f})")
    assert mx <= BOUND[0] and mean <= BOUND[1], (preset, backend, mx, mean)
    assert pmx <= BOUND[0], (preset, backend, pmx)

