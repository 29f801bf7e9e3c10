"""SGLang: vlmprep as the image processor inside SGLang's own multimodal processors.

Switched on by naming this package in SGLang's out-of-tree processor setting:

    SGLANG_EXTERNAL_MM_PROCESSOR_PACKAGE=vlmprep.integrations.sglang_processors python -m sglang.launch_server ...

SGLang's TokenizerManager imports every module of the package after its own processors and lets
each ``BaseMultimodalProcessor`` subclass here replace the built-in one for the models it names.
Each subclass is SGLang's own processor with vlmprep installed as the transformers image processor
it calls (``vlmprep.integrations.hf_image_processor``): SGLang still writes the prompt ids, offsets
and items. Models: those checked against SGLang 0.5.23's own path
(tests/integration/test_sglang_plugin.py): Qwen2-VL, Qwen2.5-VL and Qwen3-VL (``qwen.py``), Gemma 3
(``gemma3.py``), Pixtral (``pixtral.py``), GLM-4.1V (``glm4v.py``), Llama 4 (``llama4.py``) and
LFM2-VL (``lfm2_vl.py``). docs/how-to/sglang.md says why the others (MiniCPM-V 4.6,
Phi-4-multimodal, Ovis2, InternVL, LLaVA) are not here.
This ``__init__`` imports nothing from SGLang; the modules do (SGLang imports them).
"""


def always() -> bool:
    """The image processors' switch: naming this package in SGLang's setting is the switch."""
    return True
