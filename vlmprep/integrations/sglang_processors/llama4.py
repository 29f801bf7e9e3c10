"""SGLang's Llama 4 processor, with vlmprep as its image processor (see the package)."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.mllama4 import Llama4ForConditionalGeneration
from sglang.srt.multimodal.processors.mllama4 import Mllama4ImageProcessor

from ..hf_image_processor import install
from . import always


class VlmprepLlama4Processor(Mllama4ImageProcessor):
    models = [Llama4ForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
