"""SGLang's Pixtral processor (Pixtral in transformers' format), with vlmprep as its image
processor (see the package)."""
from __future__ import annotations

from typing import Any

from sglang.srt.models.pixtral import PixtralForConditionalGeneration, PixtralVisionModel
from sglang.srt.multimodal.processors.pixtral import PixtralProcessor as _SGLangPixtral

from ..hf_image_processor import install
from . import always


# Named as SGLang's: its LLaVA wrapper (Pixtral in transformers' format is a Llava checkpoint
# with a pixtral vision tower) finds the inner processor by class name among the registered ones.
class PixtralProcessor(_SGLangPixtral):
    models = [PixtralVisionModel, PixtralForConditionalGeneration]

    def __init__(self, hf_config: Any, server_args: Any, _processor: Any, *args: Any, **kwargs: Any):
        super().__init__(hf_config, server_args, _processor, *args, **kwargs)
        install(self._processor.image_processor, always)
