"""SGLang's Gemma 3 processor, with vlmprep as its image processor (see the package)."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.gemma3_mm import Gemma3ForConditionalGeneration
from sglang.srt.multimodal.processors.gemma3 import Gemma3SGLangImageProcessor

from ..hf_image_processor import install
from . import always


class VlmprepGemma3Processor(Gemma3SGLangImageProcessor):
    models = [Gemma3ForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
