"""``FamilySpec``: everything one model family declares, in one place (its ``presets/<family>.py``).

Each family module ends with ``FAMILY = FamilySpec(...)``; ``vlmprep.presets.FAMILIES`` lists the
modules, and every layer above reads its family tables from these declarations
(``vlmprep.presets.forms()``, ``video_families()``, ``vit_towers()``): the preset registry,
``from_config``, the video defaults, and the adapters' tables (vLLM, SGLang, transformers prompt
tokens, ViT towers). Sizing rules (``vlmprep.plan``) and ``to_hf`` forms (``vlmprep.hf_forms``)
stay code of their own, found by name.

Data only: this module imports nothing of vlmprep at run time (the types are for checkers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..plan.video import VideoOptions

__all__ = ["FamilySpec", "FormSpec", "VideoSpec", "VIT_KINDS", "EMBED_LAYOUTS"]

#: How vLLM takes one request's image embeddings (``vlmprep.adapters.vllm``): ``"flat"`` (one
#: concatenated tensor + ``image_grid_thw``; mixed sizes fine), ``"stacked"`` (one
#: ``(num_images, num_embeddings, hidden)`` tensor: one size per request) or ``"sized"`` (one
#: ``(num_embeddings_i, hidden)`` tensor per image + ``image_sizes`` ``(num_images, 2)`` [W, H]
#: from which vLLM sizes each placeholder; mixed sizes fine).
EMBED_LAYOUTS = ("flat", "stacked", "sized")

#: How ``vlmprep.adapters.vit.encode`` runs a transformers class (``FamilySpec.vit_towers`` keys):
#: ``qwen_tower`` / ``qwen_model`` (a Qwen vision model / a full model whose ``visual`` is used:
#: merged embeddings per image), ``tile_tower`` (``last_hidden_state`` per tile), ``tile_model``
#: (``get_image_features`` per tile), ``anyres_model`` (LLaVA-NeXT / OneVision
#: ``get_image_features``: each image's packed rows, newlines included), ``naflex`` (SigLIP2
#: NaFlex: valid rows per image), ``naflex_model`` (LFM2-VL ``get_image_features`` on the naflex
#: inputs: projected tokens per tile, an image's tiles concatenated).
VIT_KINDS = ("qwen_tower", "qwen_model", "tile_tower", "tile_model", "anyres_model", "naflex",
             "naflex_model")


def _fail(where: str, what: str, expected: str, got: Any, fix: str) -> ValueError:
    return ValueError(f"{where}: {what}: expected {expected}, got {got!r}; {fix}")


@dataclass(frozen=True)
class FormSpec:
    """One ``to_hf`` form (``pack.hf_output``, a ``@vlmprep.hf_forms.hf_form``) and what the
    engines and transformers do with its batches. Empty values: nothing declared (another family
    using the same form may declare it; two different non-empty values are an error).

    Fields:
        name: the form (``"qwen2_vl"``, ``"images"``, ...).
        prompt_image_token: the token a prompt holds once per image where it is not the expanded
            ``pack.image_token`` itself (Gemma 3: ``<start_of_image>``); "": ``pack.image_token``.
        prompt_video_token: the processor's ``video_token`` a prompt holds once per video;
            "": the family takes no video.
        prompt_image_ids: ``(start, end)``: the processor writes ``start + k + end`` before
            each image's replacement, ``k`` the image's index within its text (MiniCPM-V's
            ``use_image_id``; ``expand_prompts`` does the same); (): nothing.
        vllm_embeds: one of ``EMBED_LAYOUTS``: how vLLM takes the image embeddings.
        vllm_no_embeds: why vLLM takes no image embeddings of this form (exclusive with
            ``vllm_embeds``).
        vllm_no_video_embeds: why vLLM takes no video embeddings of this form.
        sglang_precomputed: the SGLang architectures whose ``get_image_feature`` passes a
            precomputed feature through (``precomputed_embedding``).
        sglang_reencoded: architecture -> why SGLang runs its vision tower on the feature again
            (architectures of this form that are not in ``sglang_precomputed``).
        sglang_not_passed: why no SGLang architecture of this form passes the feature through.
    """

    name: str
    prompt_image_token: str = ""
    prompt_video_token: str = ""
    prompt_image_ids: tuple[str, ...] = ()
    vllm_embeds: str = ""
    vllm_no_embeds: str = ""
    vllm_no_video_embeds: str = ""
    sglang_precomputed: tuple[str, ...] = ()
    sglang_reencoded: Mapping[str, str] = field(default_factory=dict)
    sglang_not_passed: str = ""

    def __post_init__(self) -> None:
        where = f"FormSpec({self.name!r})"
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name == "auto":
            raise _fail(where, "name", "a to_hf form name (snake_case, not 'auto')", self.name,
                        "use the name its @hf_form registers")
        ids = tuple(self.prompt_image_ids)
        if ids and (len(ids) != 2 or not all(isinstance(t, str) and t for t in ids)):
            raise _fail(where, "prompt_image_ids", "() or (start, end) tokens", ids,
                        "declare the two tokens the processor wraps an image index in")
        object.__setattr__(self, "prompt_image_ids", ids)
        if self.vllm_embeds and self.vllm_embeds not in EMBED_LAYOUTS:
            raise _fail(where, "vllm_embeds", f"one of {EMBED_LAYOUTS} or ''", self.vllm_embeds,
                        "say how vLLM takes the embeddings, or why not in vllm_no_embeds")
        if self.vllm_embeds and self.vllm_no_embeds:
            raise _fail(where, "vllm_no_embeds", "'' with vllm_embeds set", self.vllm_no_embeds,
                        "declare one of the two")
        if self.sglang_precomputed and self.sglang_not_passed:
            raise _fail(where, "sglang_not_passed", "'' with sglang_precomputed set",
                        self.sglang_not_passed, "declare one of the two")
        object.__setattr__(self, "sglang_precomputed", tuple(self.sglang_precomputed))
        object.__setattr__(self, "sglang_reencoded", dict(self.sglang_reencoded))


@dataclass(frozen=True)
class VideoSpec:
    """One video family (a ``vlmprep.plan.video.VIDEO_RULES`` key, e.g. ``"qwen2.5-vl"``).

    Fields:
        defaults: () -> the public checkpoint's ``VideoOptions`` (its video processor config).
        preset: the preset whose pipeline its videos are planned with (``"qwen2.5-vl"`` plans
            with ``"qwen2-vl"``'s pipeline and Qwen2.5-VL's video processor).
        config: () -> the public checkpoint's video processor config, as transformers reads it
            (a ``video_preprocessor_config.json`` when it names ``video_processor_type``, else
            the ``preprocessor_config.json`` transformers falls back to); None: not declared.
        checkpoint: the ``presets/checkpoints/`` config shipped beside ``config`` (default
            ``preset``; SmolVLM2's video rides on the ``smolvlm`` checkpoint, pipeline
            ``idefics3``).
    """

    defaults: Callable[[], "VideoOptions"]
    preset: str
    config: Callable[[], dict[str, Any]] | None = None
    checkpoint: str | None = None


@dataclass(frozen=True)
class FamilySpec:
    """What one model family declares; ``presets/<family>.py``'s ``FAMILY``.

    Fields:
        name: the family (its module's name, e.g. ``"llava_next"``).
        presets: preset name -> builder of its Pipeline (the public checkpoint's values).
        image_processor_types: the transformers image-processor class names (4.x and 5.x
            spellings) whose ``preprocessor_config.json`` ``from_config`` reads.
        from_config: config dict -> Pipeline (None: the family reads no config).
        processor_forces: pipeline -> the image-processor kwargs the model's transformers
            Processor passes whatever the saved config says (None: none).
        forms: the ``to_hf`` forms its pipelines use, with the engines' facts (``FormSpec``).
        videos: video family -> ``VideoSpec`` (its checkpoint defaults and preset); empty: no
            video.
        video_from_config: a video processor config dict -> VideoOptions (``from_pretrained``),
            for the pipelines of ``videos``' presets.
        vit_towers: ``VIT_KINDS`` key -> the transformers classes ``vit.encode`` runs that way.
    """

    name: str
    presets: Mapping[str, Callable[[], "Pipeline"]]
    image_processor_types: tuple[str, ...] = ()
    from_config: Callable[[Mapping[str, Any]], "Pipeline"] | None = None
    processor_forces: Callable[["Pipeline"], dict[str, Any]] | None = None
    forms: tuple[FormSpec, ...] = ()
    videos: Mapping[str, VideoSpec] = field(default_factory=dict)
    video_from_config: Callable[..., "VideoOptions"] | None = None
    vit_towers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"FamilySpec({self.name!r})"
        if not self.presets:
            raise _fail(where, "presets", "at least one preset name -> Pipeline builder",
                        self.presets, "pass presets={'<name>': builder}")
        for v in self.videos.values():
            if v.preset not in self.presets:
                raise _fail(where, "videos", f"VideoSpecs whose preset is one of "
                            f"{sorted(self.presets)}", v.preset, "plan videos with a preset of "
                            "this family")
        bad = sorted(set(self.vit_towers) - set(VIT_KINDS))
        if bad:
            raise _fail(where, "vit_towers", f"keys among {VIT_KINDS}", bad,
                        "pick how vit.encode runs each class")
        names = [f.name for f in self.forms]
        if len(set(names)) != len(names):
            raise _fail(where, "forms", "each form once", names, "merge the FormSpecs")
        object.__setattr__(self, "presets", dict(self.presets))
        object.__setattr__(self, "image_processor_types", tuple(self.image_processor_types))
        object.__setattr__(self, "forms", tuple(self.forms))
        object.__setattr__(self, "videos", dict(self.videos))
        object.__setattr__(self, "vit_towers", {k: tuple(v) for k, v in self.vit_towers.items()})

    def matches(self, cfg: Mapping[str, Any]) -> bool:
        """Whether ``from_config`` reads ``cfg`` (its ``image_processor_type`` is this family's)."""
        return self.from_config is not None and \
            cfg.get("image_processor_type") in self.image_processor_types
