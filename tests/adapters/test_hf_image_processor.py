"""The engines' image hook (vlmprep.integrations.hf_image_processor) on transformers' own image
processors, without an engine (the real-engine check is tests/integration/test_vllm_plugin.py).

Oracle: transformers' processor of the same config: the torchvision backend for the default
pixels, the PIL backend for ``VLMPREP_VLLM_PIXELS=pil`` and for the GPU (``VLMPREP_VLLM_DEVICE``).
"""
from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from _support.imgdata import photo  # noqa: E402
from hfref import hf_processor  # noqa: E402
from PIL import Image  # noqa: E402

from vlmprep.integrations import hf_image_processor as hi  # noqa: E402

IMAGES = [("astronaut", None), ("chelsea", (301, 97)), ("coffee", (17, 640))]


def _images() -> list:
    out = []
    for name, size in IMAGES:
        im = Image.fromarray(photo(name))
        out.append(im.resize(size[::-1], Image.BICUBIC) if size else im)
    return out


def _hooked(preset: str, backend: str):
    ip = copy.deepcopy(hf_processor(preset, backend))
    assert hi.install(ip, lambda: True)
    return ip


def _same(got, want, atol: float = 0.0) -> None:
    """Equal keys, tensors on the host with equal dtype / shape and values (``atol``: the float
    normalize's rounding allowed, for the Pillow-exact pixels in float32)."""
    assert sorted(got) == sorted(want)
    for k in want:
        x, y = got[k], want[k]
        if torch.is_tensor(y):
            assert x.device.type == "cpu" and x.dtype == y.dtype and x.shape == y.shape, k
            ok = torch.equal(x, y) if not atol or not y.is_floating_point() else torch.allclose(x, y, rtol=0, atol=atol)
            assert ok, (k, (x.float() - y.float()).abs().max().item())
        else:
            assert x == y, k


@pytest.mark.parametrize("preset", ["qwen2-vl", "llava-next", "gemma3"])
@pytest.mark.parametrize("pixels", ["torchvision", "pil"])
def test_hook_equals_the_processor_its_pixels_name(monkeypatch, preset, pixels):
    """Default: the torchvision backend's tensors, bit-exact; ``VLMPREP_VLLM_PIXELS=pil``: the PIL
    backend's, the uint8 levels exact and float32 within its normalize's rounding (2 ulp)."""
    monkeypatch.delenv(hi.DEVICE_ENV, raising=False)
    if pixels == "pil":
        monkeypatch.setenv(hi.PIXELS_ENV, "pil")
    else:
        monkeypatch.delenv(hi.PIXELS_ENV, raising=False)
    ip = _hooked(preset, "torchvision")
    before = dict(hi.STATS)
    got = ip(_images(), return_tensors="pt")
    assert hi.STATS["vlmprep"] == before["vlmprep"] + 1
    _same(got, hf_processor(preset, pixels)(_images(), return_tensors="pt"), atol=1e-6 if pixels == "pil" else 0)
    if pixels == "pil":
        raw = dict(return_tensors="pt", do_rescale=False, do_normalize=False)
        if preset == "qwen2-vl":  # vLLM's mm_device_do_normalize form: the torchvision
            # backend's dtype (uint8; the PIL backend gives the same levels as float32)
            want = dict(hf_processor(preset, "pil")(_images(), **raw))
            assert torch.equal(want["pixel_values"], want["pixel_values"].round())
            want["pixel_values"] = want["pixel_values"].to(torch.uint8)
            assert hf_processor(preset, "torchvision")(_images(), **raw)["pixel_values"].dtype == torch.uint8
            _same(ip(_images(), **raw), want)


def test_hook_answers_in_the_dtype_the_processor_normalizes_in(monkeypatch):
    """Llama 4's image processor rescales and normalizes in bfloat16 (``FLOAT_DTYPE``): the hook
    answers in bfloat16 too, bit-exact (SGLang hands the processor's dtype to the model)."""
    monkeypatch.delenv(hi.DEVICE_ENV, raising=False)
    monkeypatch.delenv(hi.PIXELS_ENV, raising=False)
    assert hi.FLOAT_DTYPE == {"Llama4ImageProcessor": "bfloat16"}
    ip = _hooked("llama4", "torchvision")
    before = dict(hi.STATS)
    got = ip(_images(), return_tensors="pt")
    assert hi.STATS["vlmprep"] == before["vlmprep"] + 1
    want = hf_processor("llama4", "torchvision")(_images(), return_tensors="pt")
    assert got["pixel_values"].dtype == torch.bfloat16
    _same(got, want)


@pytest.mark.parametrize("value", ["gpu", "cuda:x", "cpu:0", "tpu"])
def test_a_device_that_names_none_is_refused_with_the_fix(monkeypatch, value):
    monkeypatch.setenv(hi.DEVICE_ENV, value)
    with pytest.raises(ValueError, match=r"VLMPREP_VLLM_DEVICE: expected 'cpu', 'cuda' or 'cuda:N'.*fix"):
        hi.device()


def test_device_cpu_and_unset_are_the_default(monkeypatch):
    monkeypatch.setenv(hi.DEVICE_ENV, " CPU ")
    assert hi.device() == "cpu"
    monkeypatch.delenv(hi.DEVICE_ENV)
    assert hi.device() == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (bench/gpu_check.py's engine step runs it)")
@pytest.mark.parametrize("dtype_kw", [{}, {"do_rescale": False, "do_normalize": False}], ids=["float32", "uint8"])
def test_hook_on_cuda_gives_the_pil_processors_tensors_on_the_host(monkeypatch, dtype_kw):
    monkeypatch.setenv(hi.DEVICE_ENV, "cuda")
    ip = _hooked("qwen2-vl", "torchvision")
    got = ip(_images(), return_tensors="pt", **dtype_kw)
    want = hf_processor("qwen2-vl", "pil")(_images(), return_tensors="pt", **dtype_kw)
    _same(got, want, atol=1e-6)
