"""One declaration per model family (docs/architecture.md, "A new model family").

1. Every table that used to be kept by hand beside the families is now derived from their
   declarations (``FAMILY = FamilySpec(...)`` in ``presets/<family>.py``), the ``@hf_form``
   registry or the ops' ``torchvision_exact`` flag: each equals the literal it replaced (written
   out here, as it was).
2. The plan layer reads no preset: video defaults and video pipelines come from the declarations.
3. A toy family added through the public extension points only (a ``SizingOp`` + its
   ``@sizing_rule``, an ``@hf_form``, a ``@video_rule``, a module declaring ``FAMILY`` given to
   ``presets.register``) runs end to end: presets, from_config, Processor on two backends, plan of a
   video with its declared defaults, ``to_hf`` in its form, and every adapter reading its facts.
"""
from __future__ import annotations

import ast
import functools
import types
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import vlmprep
from vlmprep import hf_forms, ops, plan, presets
from vlmprep.plan import video as pv
from vlmprep.presets import FamilySpec, FormSpec, VideoSpec

ROOT = Path(vlmprep.__file__).resolve().parent

# -- 1. the former literals -------------------------------------------------------------------
OLD_HF_OUTPUTS = ("auto", "qwen2_vl", "images", "got_ocr2", "pixtral", "siglip2", "idefics3",
                  "llava_next", "llava_onevision", "mllama", "gemma3",
                  "ovis2")
OLD_SIZING_OPS = ("smart_resize", "resize", "anyres_tile", "internvl_tile", "canvas_tile",
                  "idefics3_tile", "pixtral_resize", "naflex_resize", "pan_and_scan",
                  "ovis2_tile")
OLD_EMBEDDING_FORMS = {"qwen2_vl": "flat", "got_ocr2": "stacked", "llava_next": "stacked",
                       "llava_onevision": "stacked", "images": "stacked"}
OLD_NO_EMBEDDINGS = {
    "pixtral": "vLLM 0.33 takes no Pixtral embeddings (its processor rejects embedding items: "
               "'Invalid type of data items'; llava.py: 'Pixtral-HF does not support "
               "image_embeds.'; the Mistral-format PixtralForConditionalGeneration takes images only)",
    "idefics3": "vLLM 0.33's Idefics3 / SmolVLM processor sizes the placeholder from the image "
                "and rejects embedding items (idefics3.py get_replacement_idefics3: "
                "mm_items.get_items('image', ImageProcessorItems) -> 'Invalid type of data items')",
    "gemma3": "vLLM 0.33 takes no Gemma 3 embeddings (its processor rejects embedding items: "
              "'Invalid type of data items'; gemma3_mm.py: 'Gemma3 does not support "
              "image_embeds.')",
    "mllama": "vLLM 0.33 has no Mllama model (MllamaForConditionalGeneration was removed in 0.10.2)",
    "siglip2": "SigLIP2 is a vision encoder, not a vLLM generation model",
    "ovis2": ('vLLM 0.33 serves no Ovis2ForConditionalGeneration (only Ovis and Ovis2.5, with '
              'their own preprocessing; checked in the engines venv); give the engines the '
              'images'),
}
OLD_NO_VIDEO_EMBEDDINGS = {
    "llava_onevision": "vLLM 0.33's LlavaOnevisionForConditionalGeneration reads only "
                       "pixel_values_videos (llava_onevision.py _parse_and_validate_video_input "
                       "never reads video_embeds)",
    "got_ocr2": "vLLM 0.33's InternVL-hf model (interns1.py) sizes each video placeholder from "
                "video_num_patches, which only its own processor returns (embedding items have "
                "none)",
    "idefics3": "vLLM 0.33's Idefics3 / SmolVLM model has no video input",
}
OLD_PRECOMPUTED_ARCHITECTURES = {
    "qwen2_vl": ("Qwen2_5_VLForConditionalGeneration",),
    "got_ocr2": ("InternVLChatModel",),
    "gemma3": ("Gemma3ForConditionalGeneration",),
}
OLD_REENCODED = {
    "Qwen2VLForConditionalGeneration": "qwen2_vl.py get_image_feature runs self.visual on the "
                                       "feature",
    "Qwen3VLForConditionalGeneration": "qwen3_vl.py runs self.visual on the feature",
}
OLD_NOT_PASSED = {
    "llava_next": "llava.py get_image_feature runs the vision tower on the feature",
    "llava_onevision": "llava.py get_image_feature runs the vision tower on the feature",
    "images": "llava.py get_image_feature runs the vision tower on the feature",
    "pixtral": "pixtral.py get_image_feature runs the vision encoder on the feature",
    "idefics3": "SGLang 0.5.23 has no Idefics3 model",
    "mllama": "mllama.py runs the vision model on the feature",
    "siglip2": "a vision encoder, not an SGLang generation model",
    "ovis2": "SGLang 0.5.23 has no Ovis2 model",
}
OLD_PROMPT_IMAGE_TOKENS = {"gemma3": "<start_of_image>", "ovis2": "<image>"}
OLD_PROMPT_VIDEO_TOKENS = {"qwen2_vl": "<|video_pad|>", "llava_onevision": "<video>",
                           "got_ocr2": "<video>", "idefics3": "<video>"}
OLD_QWEN = ("Qwen2VisionTransformerPretrainedModel", "Qwen2_5_VisionTransformerPretrainedModel",
            "Qwen3VLVisionModel", "Qwen3VLMoeVisionModel",
            # added since the split (issue 30): GLM-4.1V / 4.5V, after qwen in FAMILIES order
            "Glm4vVisionModel", "Glm4vMoeVisionModel")
OLD_QWEN_FULL = ("Qwen2VLModel", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLModel",
                 "Qwen2_5_VLForConditionalGeneration", "Qwen3VLModel",
                 "Qwen3VLForConditionalGeneration",
                 "Qwen3VLMoeModel", "Qwen3VLMoeForConditionalGeneration",
                 # added since the split (issue 30)
                 "Glm4vModel", "Glm4vForConditionalGeneration", "Glm4vMoeModel",
                 "Glm4vMoeForConditionalGeneration")
OLD_TILE_TOWERS = ("SiglipVisionModel", "CLIPVisionModel", "InternVLVisionModel",
                   # added since the split (issue 30)
                   "Ovis2VisionModel", "Llama4VisionModel")
OLD_FULL_TILES = ("InternVLModel", "InternVLForConditionalGeneration", "LlavaModel",
                  "LlavaForConditionalGeneration",
                  # added since the split (issue 30)
                  "Ovis2Model", "Ovis2ForConditionalGeneration")
OLD_SUPPORTED_TOWERS = {
    **{n: "merged embeddings (tokens_i, out_hidden) per image" for n in OLD_QWEN + OLD_QWEN_FULL},
    **{n: "last_hidden_state (tiles_i, L, D) per image" for n in OLD_TILE_TOWERS},
    **{n: "get_image_features (tiles_i, tokens, D_llm) per image" for n in OLD_FULL_TILES},
    "Siglip2VisionModel": "last_hidden_state valid rows (patches_i, D) per image",
    # added since the split (issue 32): LLaVA-NeXT / OneVision models, packed rows per image
    **{n: "get_image_features packed (num_embeddings_i, D_llm) per image"
       for n in ("LlavaNextModel", "LlavaNextForConditionalGeneration", "LlavaOnevisionModel",
                 "LlavaOnevisionForConditionalGeneration")},
    # added since the split (issue 30): LFM2-VL models, projected tokens per image
    **{n: "get_image_features (tokens_i, D_llm) per image, tiles concatenated"
       for n in ("Lfm2VlModel", "Lfm2VlForConditionalGeneration")},
}
#: plan.video.VIDEO_PRESET (family -> the preset it planned with) and the VIDEO_DEFAULTS keys.
OLD_VIDEO_PRESET = {"qwen2-vl": "qwen2-vl", "qwen3-vl": "qwen3-vl", "qwen2.5-vl": "qwen2-vl",
                    "internvl": "internvl", "llava-onevision": "llava-onevision",
                    "idefics3": "idefics3"}
#: presets._config.VIDEO_CONFIG_MODULES (pipeline name -> the module reading its video config).
OLD_VIDEO_CONFIG_MODULES = {"qwen2-vl": "qwen", "qwen3-vl": "qwen", "llava-onevision": "llava_next",
                            "internvl": "internvl", "idefics3": "idefics3"}

# added with GLM-4.1V (issue 30): its own form (Qwen's keys, GLM's prompt tokens, engines refused)
_GLM4V_VLLM = ("vLLM 0.33's Glm4v model takes image_embeds + image_grid_thw (glm4_1v.py "
               'Glm4vImageEmbeddingInputs), but its processor parses items with the generic '
               "MultiModalDataParser: the {'image_embeds', 'image_grid_thw'} dict is read as two"
               " images and fails ('Incorrect image source ... Got image_embeds'; checked "
               'against 0.33.0 in the engines venv); give vLLM the images')
OLD_HF_OUTPUTS += ("glm4v",)
OLD_SIZING_OPS += ("glm4v_resize",)
OLD_NO_EMBEDDINGS["glm4v"] = _GLM4V_VLLM
OLD_NO_VIDEO_EMBEDDINGS["glm4v"] = _GLM4V_VLLM
OLD_NOT_PASSED["glm4v"] = "SGLang 0.5.23's glm4v.py get_image_feature runs self.visual on the feature"
OLD_PROMPT_VIDEO_TOKENS["glm4v"] = "<|video|>"
OLD_VIDEO_PRESET["glm4v"] = "glm4v"
OLD_VIDEO_CONFIG_MODULES["glm4v"] = "glm4v"

# added with MiniCPM-V 4.6 (issue 30): its own form (tiles side by side, target_sizes), engines
# refusals checked against vLLM 0.33 in session 23
OLD_HF_OUTPUTS += ("minicpmv",)
OLD_SIZING_OPS += ("minicpmv_slice",)
# (its vLLM embedding form "sized" and the SGLang reasons: issue 30, Deliver 3)
OLD_EMBEDDING_FORMS["minicpmv"] = "sized"
OLD_NOT_PASSED["minicpmv"] = ("SGLang 0.5.23's MiniCPM-V 4.6 processor (minicpmv4_6.py "
                              "MiniCPMV4_6MultimodalProcessor) sends every image_data item through its own "
                              "MiniCPMV4_6ImageProcessor.preprocess, a dict item included ('Unsupported "
                              "image type: <class 'dict'>')")

# added with LFM2-VL (issue 30): its own form (siglip2's keys, a sequence per tile), engines not
# declared (no engines venv)
_LFM2_NOT_CHECKED = ("vLLM 0.33's LFM2-VL (lfm2_vl.py) takes no image embeddings, only pixel inputs "
                     '(checked in the engines venv); give the engines the images')
OLD_HF_OUTPUTS += ("lfm2_vl",)
OLD_SIZING_OPS += ("lfm2_vl_tile",)
OLD_NO_EMBEDDINGS["lfm2_vl"] = _LFM2_NOT_CHECKED
OLD_NOT_PASSED["lfm2_vl"] = "SGLang 0.5.23's lfm2_vl.py get_image_feature runs the vision tower on the feature"

# added with Llama 4 (issue 30): its own form (tiles + aspect_ratios), the prompt's <|image|>
# expanded to <|patch|> tokens, engines not declared (no engines venv)
_LLAMA4_NOT_CHECKED = ("vLLM 0.33's Llama 4 (mllama4.py) takes no image embeddings, only pixel inputs "
                       '(checked in the engines venv); give the engines the images')
OLD_HF_OUTPUTS += ("llama4",)
OLD_SIZING_OPS += ("llama4_tile",)
OLD_NO_EMBEDDINGS["llama4"] = _LLAMA4_NOT_CHECKED
OLD_NOT_PASSED["llama4"] = "SGLang 0.5.23's mllama4.py get_image_feature runs the vision model on the feature"
OLD_PROMPT_IMAGE_TOKENS["llama4"] = "<|image|>"

# added with Phi-4-multimodal (issue 30): its own form (image_pixel_values, image_sizes,
# image_attention_mask, num_img_tokens), engines not declared (no engines venv); phi4_hd
# torchvision_exact once its global view became a plan.Canvas.normalized canvas (issue 30)
_PHI4_NOT_CHECKED = ('vLLM 0.33 serves Phi-4-multimodal only as Phi4MMForCausalLM (phi4mm.py), with '
                     "the checkpoint's remote-code image processor, and its model reads only pixel "
                     'input_image_embeds (checked in the engines venv); give the engines the images')
OLD_HF_OUTPUTS += ("phi4_multimodal",)
OLD_SIZING_OPS += ("phi4_hd",)
OLD_NO_EMBEDDINGS["phi4_multimodal"] = _PHI4_NOT_CHECKED
OLD_NOT_PASSED["phi4_multimodal"] = ("SGLang 0.5.23 serves Phi-4-multimodal only as Phi4MMForCausalLM (phi4mm.py, "
                                     "the checkpoint's remote-code processor), whose get_image_feature runs the "
                                     "vision encoder on the feature")


def test_hf_outputs_are_the_hf_form_registry():
    # order is that of registration (only messages show it); the names are the same
    assert hf_forms.HF_OUTPUTS[0] == "auto" and sorted(hf_forms.HF_OUTPUTS) == sorted(OLD_HF_OUTPUTS)
    assert hf_forms.HF_OUTPUTS == hf_forms.hf_outputs()
    assert not hasattr(ops, "HF_OUTPUTS")  # one home: the registry (ops is a layer below it)
    assert set(hf_forms.HF_OUTPUTS) - {"auto"} == set(hf_forms.HF_FORMS)
    # every declared form is registered, and every registered form is some family's
    assert set(presets.forms()) == set(hf_forms.HF_FORMS)
    with pytest.raises(ValueError, match=r"to_hf form name.*got 'not a form'"):
        ops.pack(hf_output="not a form")


def test_sizing_ops_come_from_the_op_declarations():
    tv_match = pytest.importorskip("vlmprep.backends.torch.tv_match")
    assert sorted(tv_match.SIZING_OPS) == sorted(OLD_SIZING_OPS)
    assert all(ops.OP_TYPES[n].sizing and ops.OP_TYPES[n].torchvision_exact
               for n in tv_match.SIZING_OPS)


def test_adapter_tables_come_from_the_family_declarations():
    from vlmprep.adapters import sglang, transformers, vit, vllm
    assert vllm.EMBEDDING_FORMS == OLD_EMBEDDING_FORMS
    assert vllm._NO_EMBEDDINGS == OLD_NO_EMBEDDINGS
    assert vllm._NO_VIDEO_EMBEDDINGS == OLD_NO_VIDEO_EMBEDDINGS
    assert sglang.PRECOMPUTED_ARCHITECTURES == OLD_PRECOMPUTED_ARCHITECTURES
    assert sglang._REENCODED == OLD_REENCODED
    assert sglang._NOT_PASSED == OLD_NOT_PASSED
    assert transformers.PROMPT_IMAGE_TOKENS == OLD_PROMPT_IMAGE_TOKENS
    assert transformers.PROMPT_VIDEO_TOKENS == OLD_PROMPT_VIDEO_TOKENS
    assert vit.SUPPORTED_TOWERS == OLD_SUPPORTED_TOWERS
    assert vit._QWEN == OLD_QWEN and vit._QWEN_FULL == OLD_QWEN_FULL
    # only membership is read (the dispatch); the families' order gives these
    assert sorted(vit._TILE_TOWERS) == sorted(OLD_TILE_TOWERS)
    assert sorted(vit._FULL_TILES) == sorted(OLD_FULL_TILES)
    with pytest.raises(AttributeError, match="nope"):
        vit.nope  # type: ignore[attr-defined]  # noqa: B018


def test_video_tables_come_from_the_family_declarations():
    videos = presets.video_families()
    assert {f: v.preset for f, v in videos.items()} == OLD_VIDEO_PRESET
    assert set(videos) == set(pv.VIDEO_RULES)  # every rule has its declared defaults
    for f in videos:
        module = presets.family(videos[f].preset)
        assert presets.video_defaults(f) == module.video_defaults(f)
        assert presets.video_pipeline(f) == presets.get(OLD_VIDEO_PRESET[f])
    for name, module in OLD_VIDEO_CONFIG_MODULES.items():
        assert presets.video_reader(name) is getattr(presets, module).video_from_config
    assert presets.video_reader("llava-next") is None and presets.video_reader("siglip") is None
    with pytest.raises(ValueError, match=r"video defaults, one of .*got 'siglip'"):
        presets.video_defaults("siglip")


def test_the_plan_layer_imports_no_preset():
    for path in (ROOT / "plan").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any("presets" in n for n in names), f"{path.name} imports {names}"
    assert not hasattr(pv, "VIDEO_DEFAULTS") and not hasattr(pv, "video_defaults")


def test_every_module_in_families_declares_its_family():
    for fam in presets.FAMILIES:
        spec = presets.spec(fam)
        assert spec.presets == fam.PRESETS and spec.name == fam.__name__.rsplit(".", 1)[1]
        assert spec.image_processor_types == fam.IMAGE_PROCESSOR_TYPES
    with pytest.raises(TypeError, match="FAMILY = vlmprep.presets.FamilySpec"):
        presets.register(types.ModuleType("no_family"))
    clash = types.SimpleNamespace(FAMILY=FamilySpec("clash", {"qwen2-vl": presets.qwen.qwen2_vl}))
    before = presets.FAMILIES
    with pytest.raises(RuntimeError, match="preset 'qwen2-vl' defined twice"):
        presets.register(clash)
    assert presets.FAMILIES is before  # nothing changed
    with pytest.raises(RuntimeError, match="sglang_reencoded.*declared twice"):
        presets._merge_form(FormSpec("x", sglang_reencoded={"A": "1"}),
                            FormSpec("x", sglang_reencoded={"A": "2"}), "a, b")
    with pytest.raises(ValueError, match="vllm_embeds: expected one of"):
        FormSpec("x", vllm_embeds="ragged")


# -- 3. a toy family through the public extension points ----------------------------------------
TOY_TOKENS = {"image": "<toy>", "patch": "<toy_patch>", "video": "<toy_video>"}


@pytest.fixture()
def toy(monkeypatch):
    """Registers the toy family (op, sizing rule, hf_form, video rule, FAMILY) and takes every
    registration back afterwards."""
    saved_ops, saved_rules = dict(ops.OP_TYPES), dict(plan.SIZING_RULES)
    saved_forms, saved_videos = dict(hf_forms.HF_FORMS), dict(pv.VIDEO_RULES)
    monkeypatch.setattr(hf_forms, "HF_OUTPUTS", hf_forms.HF_OUTPUTS)
    monkeypatch.setattr(presets, "FAMILIES", presets.FAMILIES)
    try:
        yield _make_toy()
    finally:
        for reg, saved in ((ops.OP_TYPES, saved_ops), (plan.SIZING_RULES, saved_rules),
                           (hf_forms.HF_FORMS, saved_forms), (pv.VIDEO_RULES, saved_videos)):
            reg.clear()
            reg.update(saved)  # type: ignore[arg-type]


def _make_toy() -> types.ModuleType:
    import torch

    # the sizing rule: squash to size x size, one tile
    @dataclass(frozen=True)
    class toy_square(ops.SizingOp):
        name: ClassVar[str] = "toy_square"
        size: int = 28
        interpolation: str = "bilinear"

        @property
        def tile_hw(self) -> tuple[int, int]:
            return self.size, self.size

    @plan.sizing_rule(toy_square)
    def _toy_rule(op, hw, pipeline):
        return plan.one_canvas((op.size, op.size), pipeline)

    # its transformers output: the tiles and a count per image
    @hf_forms.hf_form("toy")
    def _toy_form(b):
        return {"pixel_values": b.pixel_values,
                "toy_tiles": torch.bincount(b.image_index, minlength=b.num_images)}

    # its video rule: every frame of the clip (or options.num_frames of them), one tile each
    @pv.video_rule("toy-vl")
    def _toy_video(pipeline, meta, opts, clip, index):
        n = min(opts.num_frames or clip.count, clip.count)
        side = pipeline.sizing.size // pipeline.patchify.patch_size
        per = side * side
        return pv.VideoPlan(index=index, meta=meta,
                            frame_indices=[clip.first + i for i in pv.uniform_indices(clip.count, n)],
                            resized_hw=(pipeline.sizing.size,) * 2, grid_thw=[(1, side, side)] * n,
                            num_patches=n * per, num_tokens=n * per, num_embeddings=n * per,
                            placeholder=TOY_TOKENS["patch"] * (n * per))

    # the family module: builders, config reader, and its one declaration
    mod = types.ModuleType("toy_family")

    def toy_vl(size: int = 28) -> vlmprep.Pipeline:
        return vlmprep.Pipeline([ops.decode(), toy_square(size=size), ops.normalize(),
                                 ops.patchify(patch_size=14, order="tiles"),
                                 ops.pack(image_token=TOY_TOKENS["patch"], hf_output="toy")],
                                name="toy-vl")

    def video_from_config(cfg):
        return pv.VideoOptions(num_frames=cfg.get("num_frames", 3), do_sample_frames=True,
                               family="toy-vl")

    mod.FAMILY = FamilySpec(  # type: ignore[attr-defined]
        name="toy", presets={"toy-vl": toy_vl}, image_processor_types=("ToyImageProcessor",),
        from_config=lambda cfg: toy_vl(int(cfg.get("size", 28))),
        forms=(FormSpec("toy", prompt_image_token=TOY_TOKENS["image"],
                        prompt_video_token=TOY_TOKENS["video"], vllm_embeds="stacked",
                        vllm_no_video_embeds="toy: no video embeddings",
                        sglang_not_passed="toy: its model re-encodes the feature"),),
        videos={"toy-vl": VideoSpec(functools.partial(video_from_config, {}), "toy-vl")},
        video_from_config=video_from_config,
        vit_towers={"tile_tower": ("ToyVisionModel",)})
    presets.register(mod)
    return mod


def test_toy_family_runs_end_to_end(toy):
    import torch

    from vlmprep.adapters import sglang, transformers, vit, vllm
    # presets: the registry, get, from_config, the video declarations
    assert "toy-vl" in presets.names() and presets.family("toy-vl") is toy
    assert presets.get("toy-vl", size=42).tile_hw == (42, 42)
    assert presets.from_config({"image_processor_type": "ToyImageProcessor", "size": 56}) \
        == presets.get("toy-vl", size=56)
    assert presets.video_defaults("toy-vl").num_frames == 3
    assert presets.video_pipeline("toy-vl") == presets.get("toy-vl")

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((40, 60), (90, 20))]
    ref = vlmprep.Processor("toy-vl", backend="reference")
    assert ref.video_options == presets.video_defaults("toy-vl")  # the declared defaults
    batch = ref(images)
    assert tuple(batch.pixel_values.shape) == (2, 3, 28, 28) and batch.num_tokens == [4, 4]
    levels = [vlmprep.Processor("toy-vl", backend=b, dtype="uint8")(images).pixel_values.int()
              for b in ("reference", "torch")]
    # the compiled resize is Pillow's: the same bytes (else torch's own resize: a level or so)
    assert (levels[0] - levels[1]).abs().max() <= (0 if vlmprep.kernels.available() else 3)
    with pytest.raises(ValueError, match="'toy_square' in 'toy-vl'"):  # not torchvision_exact
        vlmprep.Processor("toy-vl", backend="torch", match="torchvision")

    # its to_hf form
    hf = batch.to_hf()
    assert set(hf) == {"pixel_values", "toy_tiles"} and hf["toy_tiles"].tolist() == [1, 1]

    # a video: planned with the declared defaults (3 of 10 frames)
    frames = rng.integers(0, 256, (10, 32, 48, 3), dtype=np.uint8)
    vp = ref.plan(videos=[vlmprep.Video(frames, source_fps=10.0)]).videos[0]
    assert vp.error is None and vp.frame_indices == [0, 3, 6] and vp.num_tokens == 12

    # transformers: the declared prompt tokens
    assert transformers.prompt_image_token(batch) == TOY_TOKENS["image"]
    text = transformers.expand_prompt(f"a {TOY_TOKENS['image']} b {TOY_TOKENS['image']}", batch)
    assert text == f"a {TOY_TOKENS['patch'] * 4} b {TOY_TOKENS['patch'] * 4}"
    assert transformers.PROMPT_VIDEO_TOKENS["toy"] == TOY_TOKENS["video"]

    # vLLM: stacked embeddings, as declared; its video reason
    embeds = torch.randn(8, 16)
    out = vllm.prompt_inputs(f"{TOY_TOKENS['image']}{TOY_TOKENS['image']}", batch, embeds)
    assert tuple(out["multi_modal_data"]["image"].shape) == (2, 4, 16)
    assert vllm.EMBEDDING_FORMS["toy"] == "stacked"
    assert vllm._NO_VIDEO_EMBEDDINGS["toy"] == "toy: no video embeddings"

    # SGLang: refused with the declared reason
    with pytest.raises(ValueError, match="form 'toy': toy: its model re-encodes the feature"):
        sglang.precomputed_embedding(embeds, batch, [1, 2])

    # ViT: its tower class runs as a tile tower
    class ToyVisionModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = types.SimpleNamespace(image_size=28, patch_size=14)
            self.proj = torch.nn.Conv2d(3, 5, 14, 14)

        def forward(self, pixel_values, return_dict=True):
            x = self.proj(pixel_values).flatten(2).transpose(1, 2)
            return types.SimpleNamespace(last_hidden_state=x)

    assert "ToyVisionModel" in vit.SUPPORTED_TOWERS
    feats = vit.encode(ToyVisionModel(), batch)
    assert [tuple(f.shape) for f in feats] == [(1, 4, 5), (1, 4, 5)]


def test_the_toy_family_is_gone_after_its_test():
    assert "toy-vl" not in presets.names() and "toy" not in hf_forms.HF_FORMS
    assert "toy" not in presets.forms() and "toy-vl" not in pv.VIDEO_RULES
