"""vLLM plugin: vlmprep as the image processor inside vLLM's own multimodal processors.

Switched on by ``VLMPREP_VLLM=1`` in the environment of ``vllm serve`` / ``LLM(...)`` (every vLLM
process reads it; installing vlmprep alone changes nothing). vLLM loads ``register`` through the
``vllm.general_plugins`` entry point in each of its processes, before it builds any processor.

Where it acts (``hf_image_processor``, shared with the SGLang processors): the transformers
*image processor* that vLLM's processor for a model calls (inside
the transformers processor, which still makes the prompt text, so prompt expansion, placeholder
ranges, mm hashes and vLLM's processor cache are vLLM's own code), for the vLLM processors in
``PROCESSORS``. Each such image processor whose class vlmprep knows (``SUPPORTED``) answers
with vlmprep's tensors, built from its own config (the checkpoint's, with the server's
``mm_processor_kwargs`` applied), bit-exact with it: ``match="torchvision"`` when it is
transformers' torchvision backend (vLLM's default), else Pillow-exact. Anything it does
not take (a keyword other than its config's values, an unknown image type) goes to the
image processor itself, counted in ``STATS["fallback"]``. Videos: the transformers video
processor of the same processors, for the classes in ``SUPPORTED_VIDEO`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL;
``hf_video_processor``: vLLM's sampled frames, torchvision's pixels); others keep transformers'.

Request images: vLLM's media connector decodes them before any processor runs; with the plugin on
and a processor in ``DEFER_DECODE`` served, a plain JPEG is left undecoded there and vlmprep
decodes its bytes (``vllm_media``: same checks, same hash, same pixels), fused with the resize.

``VLMPREP_VLLM_PIXELS=pil`` asks for the pixels of transformers' PIL processors (what the
checkpoints were trained on) instead of the torchvision backend's. ``VLMPREP_VLLM_DEVICE=cuda``
runs the images on the GPU in the API server's process (Pillow-exact pixels, returned on the host;
``hf_image_processor``); videos stay on the CPU.
"""
from __future__ import annotations

import os
from typing import Any

from .hf_image_processor import DEVICE_ENV, PIXELS_ENV, STATS, SUPPORTED, device, install
from .hf_video_processor import SUPPORTED_VIDEO, install_video
from .vllm_media import install_load_bytes

# DEVICE_ENV, PIXELS_ENV, STATS, SUPPORTED and install live in hf_image_processor (shared with SGLang's)
__all__ = ["DEFER_DECODE", "DEVICE_ENV", "ENV", "PIXELS_ENV", "PROCESSORS", "SUPPORTED", "SUPPORTED_VIDEO", "STATS",
           "enabled", "register", "install"]

ENV = "VLMPREP_VLLM"

#: vLLM processors (exact class) whose image processor vlmprep answers for: the ones checked
#: against vLLM 0.33.0's own path (tests/integration/test_vllm_plugin.py: Qwen2-VL, Qwen2.5-VL,
#: Qwen3-VL, LLaVA-1.5, LLaVA-NeXT, LLaVA-OneVision, InternVL, Idefics3 and SmolVLM (vLLM's
#: SmolVLM processor is Idefics3's), Pixtral, Gemma 3, GLM-4.1V, LFM2-VL, Llama 4); others keep
#: transformers' until checked there
PROCESSORS = frozenset({
    "Qwen2VLMultiModalProcessor", "Qwen2_5_VLMultiModalProcessor", "Qwen3VLMultiModalProcessor",
    "LlavaMultiModalProcessor", "LlavaNextMultiModalProcessor", "LlavaOnevisionMultiModalProcessor",
    "InternS1MultiModalProcessor", "Idefics3MultiModalProcessor", "PixtralHFMultiModalProcessor",
    "Gemma3MultiModalProcessor", "Glm4vMultiModalProcessor",
    "Lfm2VLMultiModalProcessor", "Mllama4MultiModalProcessor", "MiniCPMV4_6MultiModalProcessor",
})

#: of those, the processors that never look at the pixels themselves: for them vLLM's loader leaves
#: plain JPEGs undecoded (``vllm_media``). Gemma 3's, Idefics3's, LFM2-VL's and Llama 4's parse the
#: images again after the image processor ran (for their sizes, in ``_postprocess_hf_mm_data`` /
#: ``_call_hf_processor``; the parse's EXIF transpose decodes them), which would decode each image
#: twice: their images are decoded by vLLM's loader as before.
DEFER_DECODE = PROCESSORS - {"Gemma3MultiModalProcessor", "Idefics3MultiModalProcessor",
                             "Lfm2VLMultiModalProcessor", "Mllama4MultiModalProcessor",
                             "MiniCPMV4_6MultiModalProcessor"}
#: whether the processor built last in this process (the served model's) is in DEFER_DECODE
_DEFER = {"on": False}


def enabled() -> bool:
    """Whether ``VLMPREP_VLLM`` switches the plugin on (1 / true / yes / on)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def register() -> None:
    """The ``vllm.general_plugins`` entry point: with ``VLMPREP_VLLM=1``, every processor
    ``MULTIMODAL_REGISTRY.create_processor`` builds from now on in this process gets vlmprep as
    its image processor (``install``). Idempotent; imports no model module."""
    if not enabled():
        return
    device()  # a VLMPREP_VLLM_DEVICE that names no device fails the server's start, not each request
    from vllm.multimodal import MULTIMODAL_REGISTRY as registry  # deferred: vLLM is optional
    if getattr(registry.create_processor, "_vlmprep", False):
        return
    create = registry.create_processor

    def create_processor(*args: Any, **kwargs: Any) -> Any:
        proc = create(*args, **kwargs)
        name = type(proc).__name__
        if name in PROCESSORS:  # exact class: models that subclass it are not checked
            _wrap_info(proc.info)
        _DEFER["on"] = name in DEFER_DECODE
        return proc

    create_processor._vlmprep = True  # type: ignore[attr-defined]
    registry.create_processor = create_processor  # the singleton's attribute shadows its method
    from vllm.multimodal.media import ImageMediaIO  # deferred: vLLM is optional
    install_load_bytes(ImageMediaIO, _defer_decode)  # plain JPEGs reach vlmprep as their bytes


def _defer_decode() -> bool:
    return enabled() and _DEFER["on"]


def _wrap_info(info: Any) -> None:
    """Make ``info.get_hf_processor`` hand out transformers processors whose image processor is
    vlmprep's (``install``)."""
    if getattr(info.get_hf_processor, "_vlmprep", False):
        return
    get = info.get_hf_processor

    def get_hf_processor(*args: Any, **kwargs: Any) -> Any:
        hf = get(*args, **kwargs)
        ip = getattr(hf, "image_processor", None)
        if ip is not None:
            install(ip, enabled)
            vp = getattr(hf, "video_processor", None)
            if vp is not None:
                install_video(vp, ip, enabled)  # the Qwen families' videos (SUPPORTED_VIDEO)
        return hf

    get_hf_processor._vlmprep = True  # type: ignore[attr-defined]
    info.get_hf_processor = get_hf_processor


