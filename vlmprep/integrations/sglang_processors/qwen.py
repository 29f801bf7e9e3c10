"""SGLang's Qwen-VL processor for Qwen2-VL, Qwen2.5-VL and Qwen3-VL, with vlmprep as its image
processor (see the package). Their videos keep SGLang's own path."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
from sglang.srt.models.qwen2_vl import Qwen2VLForConditionalGeneration
from sglang.srt.models.qwen3_vl import Qwen3VLForConditionalGeneration
from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor

from ..hf_image_processor import install
from . import always


class VlmprepQwen2VLProcessor(QwenVLImageProcessor):
    models = [Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
              Qwen3VLForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
