"""vlmprep.integrations.sglang_processors inside the REAL SGLang 0.5.23 processor registry.

As SGLang's TokenizerManager does: ``import_processors("sglang.srt.multimodal.processors")``, then
the package named by ``SGLANG_EXTERNAL_MM_PROCESSOR_PACKAGE`` with ``overwrite=True``; the
processor class for the checkpoint then comes from ``get_mm_processor_cls``. Oracle: SGLang's
built-in processor on the same requests (text with one image token per image, PIL photos): the
same input ids, item features and offsets, and vlmprep answered.
"""
from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.engines

from requires import engine  # noqa: E402

engine("sglang.srt.multimodal.processors.qwen_vl", "SGLang")
import torch  # noqa: E402

from tests.integration.checkpoints import build  # noqa: E402
from tests.integration.test_sglang_engine import _pil, server_args  # noqa: E402
from vlmprep.integrations import hf_image_processor as hip  # noqa: E402

PACKAGE = "vlmprep.integrations.sglang_processors"
REQUESTS = [["chelsea"], ["chelsea", "astronaut"], ["coffee", "astronaut", "chelsea"]]
QWEN = "<|vision_start|><|image_pad|><|vision_end|>"
TOKENS = {"qwen2-vl": QWEN, "qwen2.5-vl": QWEN, "qwen3-vl": QWEN, "gemma3": None, "pixtral": None,
          "glm4v": None, "llama4": None, "lfm2-vl": None}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from sglang.srt.managers import multimodal_processor as mp
    root = tmp_path_factory.mktemp("ckpts")
    args = server_args(root)
    saved = dict(mp.PROCESSOR_MAPPING)
    mp.import_processors("sglang.srt.multimodal.processors")
    builtin = dict(mp.PROCESSOR_MAPPING)
    mp.import_processors(PACKAGE, overwrite=True)
    ours = dict(mp.PROCESSOR_MAPPING)
    yield root, args, builtin, ours
    mp.PROCESSOR_MAPPING.clear()
    mp.PROCESSOR_MAPPING.update(saved)


def _make(mapping, family, root, args):
    from sglang.srt.managers import multimodal_processor as mp
    from sglang.srt.multimodal.transport import determine_tensor_transport_mode
    from transformers import AutoConfig, AutoProcessor
    ck = build(family, root)
    cfg = AutoConfig.from_pretrained(str(ck.path))
    saved = dict(mp.PROCESSOR_MAPPING)
    mp.PROCESSOR_MAPPING.clear()
    mp.PROCESSOR_MAPPING.update(mapping)
    try:  # built under the mapping too: SGLang's LLaVA wrapper looks its inner processor up there
        cls = mp.get_mm_processor_cls(cfg)
        proc = cls(cfg, args, AutoProcessor.from_pretrained(str(ck.path)), determine_tensor_transport_mode())
    finally:
        mp.PROCESSOR_MAPPING.clear()
        mp.PROCESSOR_MAPPING.update(saved)
    return ck, proc


def _run(ck, proc, family, names):
    from sglang.srt.managers.io_struct import GenerateReqInput
    token = TOKENS[family] or ck.image_token
    text = " a ".join([token] * len(names))
    imgs = _pil(names) if all(isinstance(n, str) for n in names) else names
    req = GenerateReqInput(text=text, image_data=imgs)
    return asyncio.run(proc.process_mm_data_async(image_data=imgs, audio_data=None, input_text=text,
                                                  request_obj=req, max_req_input_len=100000))


@pytest.mark.parametrize("family", list(TOKENS))
def test_outputs_equal_sglangs_own_processor(registry, family):
    root, args, builtin, ours = registry
    ck, ref_proc = _make(builtin, family, root, args)
    _, proc = _make(ours, family, root, args)
    # Pixtral (transformers' format) is a Llava checkpoint: SGLang's LLaVA wrapper runs the
    # processor it finds for the vision tower as ``inner``
    assert type(getattr(proc, "inner", proc)).__module__.startswith(PACKAGE), type(proc)
    assert type(getattr(ref_proc, "inner", ref_proc)).__module__.startswith("sglang."), type(ref_proc)
    for names in REQUESTS:
        _same(ck, ref_proc, proc, family, names)


def _same(ck, ref_proc, proc, family, names):
    """SGLang's built-in processor and vlmprep's on one request: the same ids, offsets, features
    (dtype included) and other item fields, vlmprep answering."""
    want = _run(ck, ref_proc, family, names)
    before = dict(hip.STATS)
    got = _run(ck, proc, family, names)
    what = (family, [getattr(n, "size", n) for n in names])
    assert hip.STATS["vlmprep"] > before["vlmprep"], f"{family}: vlmprep did not answer"
    assert hip.STATS["fallback"] == before["fallback"], f"{family}: fell back"
    assert list(got.input_ids) == list(want.input_ids), what
    assert len(got.mm_items) == len(want.mm_items)
    for a, b in zip(got.mm_items, want.mm_items):
        assert a.offsets == b.offsets, what
        assert a.feature.dtype == b.feature.dtype and a.feature.shape == b.feature.shape, what
        assert torch.equal(a.feature, b.feature), what
        assert sorted(a.model_specific_data) == sorted(b.model_specific_data), what
        for k, v in a.model_specific_data.items():
            w = b.model_specific_data[k]
            assert torch.equal(v, w) if torch.is_tensor(v) else v == w, (what, k)


@pytest.mark.parametrize("family", ["glm4v", "lfm2-vl", "llama4"])
def test_split_images_equal_sglangs_own_processor(registry, family):
    """Images large enough to be split into tiles (LFM2-VL, Llama 4; a large GLM-4.1V grid),
    next to one that is not, in one request: equal SGLang's own processor."""
    from _support.imgdata import photo
    from PIL import Image
    root, args, builtin, ours = registry
    ck, ref_proc = _make(builtin, family, root, args)
    _, proc = _make(ours, family, root, args)
    a, c = _pil(["astronaut", "coffee"])
    images = [a.resize((1500, 1000)), c.resize((700, 2000)), Image.fromarray(photo("chelsea"))]
    _same(ck, ref_proc, proc, family, images)
