"""SGLang's LFM2-VL processor, with vlmprep as its image processor (see the package)."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.lfm2_vl import Lfm2VlForConditionalGeneration
from sglang.srt.multimodal.processors.lfm2_vl import Lfm2VlImageProcessor

from ..hf_image_processor import install
from . import always


class VlmprepLfm2VlProcessor(Lfm2VlImageProcessor):
    models = [Lfm2VlForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
