"""SGLang's GLM-4.1V processor, with vlmprep as its image processor (see the package). Its
videos keep SGLang's path."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.glm4v import Glm4vForConditionalGeneration
from sglang.srt.multimodal.processors.glm4v import Glm4vImageProcessor as _SGLangGlm4v

from ..hf_image_processor import install
from . import always


class VlmprepGlm4vProcessor(_SGLangGlm4v):
    models = [Glm4vForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
