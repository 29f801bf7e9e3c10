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
TOKENS = {"qwen2-vl": QWEN, "qwen2.5-vl": QWEN, "qwen3-vl": QWEN, "gemma3": None, "pixtral": None}


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
    imgs = _pil(names)
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
        want = _run(ck, ref_proc, family, names)
        before = dict(hip.STATS)
        got = _run(ck, proc, family, names)
        assert hip.STATS["vlmprep"] > before["vlmprep"], f"{family}: vlmprep did not answer"
        assert hip.STATS["fallback"] == before["fallback"], f"{family}: fell back"
        assert list(got.input_ids) == list(want.input_ids), (family, names)
        assert len(got.mm_items) == len(want.mm_items)
        for a, b in zip(got.mm_items, want.mm_items):
            assert a.offsets == b.offsets, (family, names)
            assert a.feature.dtype == b.feature.dtype and a.feature.shape == b.feature.shape
            assert torch.equal(a.feature, b.feature), (family, names)
