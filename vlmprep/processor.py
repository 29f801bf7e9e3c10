"""Processor: the user's entry point. Resolve inputs -> plan -> backend -> PackedBatch.

Images: ``prepare`` (headers) -> ``execute`` (the Backend). Videos: ``prepare_videos`` (container
metadata: ``probe_video`` + ``plan_video``) -> ``execute_videos`` (the backend's video lowering,
``registry.VIDEO``: ``backends/video.py``), packed in ``batch.videos`` beside the images
(``pack.build_videos``). Documents: ``prepare`` (the page tree) -> ``render_documents`` (pages
as arrays) -> ``execute``; ``stream`` does that one page group at a time."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

from . import backends, hf_forms, kernels, pack, presets
from .backends import video as vx
from .backends.registry import MATCHES
from .errors import ConfigNotFoundError, ImageError, describe_source
from .io.inputs import DEFAULT_FETCH_TIMEOUT_S, as_image_list, resolve
from .io.warm import warm_decoders
from .pack import execution_pipeline
from .pipeline import Pipeline
from .plan import ImagePlan, Plan, plan_images
from .plan.grid import row_length
from .plan.video import VIDEO_RULES, VideoOptions, VideoPlan, plan_video

if TYPE_CHECKING:
    from .io.video import VideoLimits
    from .ops import decode
    from .pack import PackedBatch
    from .plan.document import DocumentPlan
    from .plan.video import VideoOptions, VideoPlan

__all__ = ["Processor"]

DTYPES = ("float32", "bfloat16", "uint8")
_ERRORS = ("raise", "skip")
DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")
# A hub repo id as transformers takes it: "Org/Name" (letters, digits, '-', '_', '.').
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


class Processor:
    """Turns images into the tensors a VLM's vision encoder expects.

    Args:
        pipeline: a preset name (``vlmprep.presets.names()``) or a ``vlmprep.Pipeline``.
        backend: ``"auto"`` | ``"dali"`` | ``"torch"`` | ``"reference"``
            (``vlmprep.backends.available()``; ``"auto"``: the first usable of dali, torch on
            CUDA, of torch, reference on the CPU). Videos run on the same backend (its video
            lowering, ``backends/video.py``); one without (dali) refuses them at the first video
            call, naming the backends that run them; ``"auto"`` picks, for videos, the first
            usable backend that has one (torch where dali is picked for the images).
        device: ``"cpu"`` | ``"cuda"`` | ``"cuda:N"``: where ``pixel_values`` is produced.
        dtype: ``"float32"`` | ``"bfloat16"`` | ``"uint8"`` (resized, patchified, not normalized).
        match: whose pixels to reproduce: ``"pil"`` (the default: transformers' PIL-backend
            processors, the models' training pixels) or ``"torchvision"`` (transformers'
            torchvision-backend processors on the CPU, bit for bit: what vLLM and SGLang feed
            the model; torch backend, device="cpu"; docs/concepts.md "Pixels").
        errors: ``"raise"`` (the first bad image raises, nothing is returned) or ``"skip"``
            (bad images are left out and named in ``batch.errors``).
        fetch: ``fetch(url) -> bytes | binary file object``, the opt-in for URL items (http(s)
            and any other scheme; without it a URL is an ImageError: vlmprep never downloads
            by itself). vlmprep bounds it by ``max_source_bytes`` and ``fetch_timeout_s``
            (``vlmprep.io.inputs.fetch_url``).
        fetch_timeout_s: seconds one ``fetch`` may take, reading included.
        video_options: ``vlmprep.plan.video.VideoOptions`` for ``videos=`` (frame sampling and
            the video pixel budget); None: the checkpoint defaults of the pipeline's family
            (``presets.video_defaults``), or the checkpoint's video config (``from_pretrained``).
            Pipelines without a video rule refuse ``videos=``.
        video_limits: ``vlmprep.io.video.VideoLimits`` bounding each video's probe and decode
            (bytes, frames, seconds, pixels, time); None: the defaults with the decode op's
            per-frame pixel limit.
        video_decoder: ``"auto"`` | ``"torchcodec"`` | ``"opencv"`` | ``"pyav"`` (opt in, where
            PyAV is installed: skips the frames nothing refers to) | ``"dali"`` (also
            ``"dali:cpu"``, ``"dali:cuda[:N]"``; ``decode_frames``). ``"auto"`` on backend
            ``"dali"`` with a CUDA device is DALI's NVDEC decoder on that GPU (``"dali:cuda:N"``).
        row_form: ``"full"`` (the default: image rows as the model's processor gives them) or
            ``"compact"`` (``vlmprep.pack.ROW_FORMS``): for pipelines whose image rows repeat over
            time (patchify order ``"merge_grouped"`` with ``temporal_patch_size`` > 1: qwen2-vl,
            qwen3-vl), one copy per patch, ``pixel_values (total_patches, C*P*P)`` (1/T of the
            bytes); geometry (grid_thw, seqlens, tokens) unchanged; ``batch.full_rows()`` /
            ``to_hf()`` give the full rows back, bit for bit. Any other pipeline: ValueError.
            Videos stay full. docs/concepts.md "Row forms".
        **overrides: any field of the pipeline's ops, e.g. ``max_pixels=1_003_520``.

    Videos (``proc(images, videos=[...])``) are sampled, resized, normalized and patchified as the
    family's transformers video processor does; those processors run on torchvision only, so video
    pixels are the torchvision processor's (bit for bit on the CPU in float32) for either
    ``match``. docs/concepts.md "Videos in a PackedBatch".
    """

    def __init__(self, pipeline: str | Pipeline = "qwen2-vl", backend: str = "auto",
                 device: str = "cpu", dtype: str = "float32", errors: str = "raise",
                 fetch: Callable[[str], Any] | None = None,
                 fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S, match: str = "pil",
                 video_options: "VideoOptions | None" = None,
                 video_limits: "VideoLimits | None" = None, video_decoder: str = "auto",
                 row_form: str = "full", **overrides: Any):
        if isinstance(pipeline, Pipeline):
            pipe = pipeline.replace(**overrides)
        elif isinstance(pipeline, str):
            pipe = presets.get(pipeline, **overrides)
        else:
            raise TypeError(f"pipeline: expected a preset name {presets.names()} or a "
                            f"vlmprep.Pipeline, got {type(pipeline).__name__}")
        device = str(device)
        if not DEVICE_RE.match(device):
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
        if errors not in _ERRORS:
            raise ValueError(f"errors: expected one of {_ERRORS}, got {errors!r}")
        if match not in MATCHES:
            raise ValueError(f"match: expected one of {MATCHES}, got {match!r}")
        hf_forms.hf_output(pipe)  # a pack(hf_output=) no @hf_form registers: refused here, not at to_hf()
        # What the backend executes: the pipeline, or its one-copy rows for "compact" (plans and
        # geometry always come from ``pipe``).
        rows_pipe = execution_pipeline(pipe, row_form)
        if fetch is not None and not callable(fetch):
            raise TypeError(f"fetch: expected None or a callable fetch(url) -> bytes or a binary file "
                            f"object, got "
                            f"{type(fetch).__name__}")
        if isinstance(fetch_timeout_s, bool) or not isinstance(fetch_timeout_s, (int, float)) \
                or not fetch_timeout_s > 0:
            raise ValueError(f"fetch_timeout_s: expected seconds > 0, got {fetch_timeout_s!r}")
        # The one place the executing Backend is chosen: backend name x match (registry.get).
        name = backends.resolve_auto(device, match) if backend == "auto" else backend
        cls = backends.get(name, match)
        if device.startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {device!r}: expected a CUDA GPU, found none "
                                   f"(torch.cuda.is_available() is False); use device='cpu'")
            if name == "reference":
                raise ValueError("backend 'reference' runs on the CPU only; use backend='torch' "
                                 "for CUDA, or device='cpu'")
        self.pipeline = pipe
        self.backend_name = name
        self._backend_asked = backend  # "auto" or the name: what decides the videos' lowering
        self._video_run: Any = None  # the video lowering, found at the first video call
        self.device = device
        self.dtype = dtype
        self.errors = errors
        self.match = match
        self.row_form = row_form
        self.fetch = fetch
        self.fetch_timeout_s = float(fetch_timeout_s)
        self._backend = cls(rows_pipe, device, dtype)
        if video_decoder == "auto" and name == "dali":
            from .io.video.dali import nvdec_for  # deferred: video modules import numpy
            video_decoder = nvdec_for(device) or "auto"  # NVDEC on the same GPU, where DALI sees it
        self.video_options, self.video_limits, self.video_decoder = _video_settings(
            pipe, video_options, video_limits, video_decoder)
        # Every decoder an image may load lazily, loaded now, once per process (io/warm.py): a
        # first import racing another thread's decode crashed the process, and it holds the GIL.
        warm_decoders()

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, revision: str | None = None,
                        cache_dir: str | os.PathLike | None = None,
                        local_files_only: bool = False, token: str | bool | None = None,
                        **kwargs: Any) -> "Processor":
        """A Processor from a checkpoint's ``preprocessor_config.json`` (or, for a checkpoint
        saved by transformers 5, its ``processor_config.json``, the image processor's config
        under ``"image_processor"``).

        ``path``: a local checkpoint folder or the json file itself (read as is, offline), or a
        hub repo id ``"Org/Name"`` (as transformers takes it) resolved through huggingface_hub:
        its local cache first when ``HF_HUB_OFFLINE=1`` or ``local_files_only=True`` (then
        nothing is downloaded), else the hub (``revision``, ``cache_dir``, ``token`` as in
        ``huggingface_hub.hf_hub_download``). Reads transformers 4.x and 5.x spellings.
        ``kwargs`` go to ``Processor(...)`` (backend, device, dtype, errors, fetch, row_form and
        field overrides). A config not found is a ``vlmprep.errors.ConfigNotFoundError`` (a
        FileNotFoundError and a ValueError) saying expected / got / fix; for an ``Org/Name`` that
        is also no local folder it names the folder checked. A hub whose host does not resolve
        (no proxy set) is not retried (huggingface_hub's back-off waits ~24 s): the cached copy
        is used, else the error comes at once.

        Video options come from ``video_preprocessor_config.json`` beside it (transformers 5.x),
        else from ``preprocessor_config.json`` itself (4.x kept the video keys there; Qwen2-VL /
        Qwen2.5-VL ship no video config and transformers reads the image one), as the family's
        video processor reads them (``presets.video_options_from_config``); None for a
        family without video.
        """
        # local_only: the hub is not asked again (for the video config) once it proved unreachable
        cfg_path, local_only = _config_file(path, revision=revision, cache_dir=cache_dir,
                                            local_files_only=local_files_only, token=token)
        cfg = presets.load_config(cfg_path)
        pipe = presets.from_config(cfg)
        if "video_options" not in kwargs:
            video_cfg = _video_config(path, cfg_path, revision=revision, cache_dir=cache_dir,
                                      local_files_only=local_only, token=token)
            kwargs["video_options"] = presets.video_options_from_config(pipe, video_cfg or cfg)
        return cls(pipe, **kwargs)

    def clone(self, **changes: Any) -> "Processor":
        """A new Processor with this one's settings (pipeline, backend, device, dtype, errors,
        match, fetch, fetch_timeout_s, video_options, video_limits, video_decoder, row_form),
        changed by ``changes`` (those names, or pipeline fields): e.g. the serving batcher's
        ``proc.clone(errors="skip")``. Shares no backend state. A new ``pipeline=`` takes its own
        family's video defaults unless ``video_options=`` is given too (and keeps the row form:
        a pipeline that refuses "compact" needs ``row_form="full"`` too)."""
        kw: dict[str, Any] = dict(backend=self._backend_asked, device=self.device, dtype=self.dtype,
                                  errors=self.errors, match=self.match, fetch=self.fetch,
                                  fetch_timeout_s=self.fetch_timeout_s,
                                  video_options=self.video_options,
                                  video_limits=self.video_limits, video_decoder=self.video_decoder,
                                  row_form=self.row_form)
        pipeline = changes.pop("pipeline", self.pipeline)
        if pipeline is not self.pipeline:
            kw["video_options"] = None  # the new pipeline's family decides
        kw.update(changes)  # the rest: settings, or pipeline fields as overrides
        return type(self)(pipeline, **kw)

    def __repr__(self) -> str:
        """``Processor('<preset>', backend=..., ..., <field>=<value>)``: the fields that differ
        from the named preset (a checkpoint config or overrides changed them) are shown."""
        extra = "".join(f", {k}={v!r}" for k, v in _overrides(self.pipeline))
        if self.row_form != "full":
            extra = f", row_form={self.row_form!r}" + extra
        if self.match != "pil":
            extra = f", match={self.match!r}" + extra
        return (f"Processor({self.pipeline.name!r}, backend={self.backend_name!r}, "
                f"device={self.device!r}, dtype={self.dtype!r}, errors={self.errors!r}{extra})")

    # -- planning -------------------------------------------------------------------------------
    def prepare(self, items: list, documents: Sequence[Any] = ()) -> tuple[list, list[ImagePlan]]:
        """Probe (headers, shapes) and plan every item once -> (sources, plans).

        ``documents``: ``vlmprep.Document`` items; each selected page is one more image item,
        after ``items``, document by document in its ``pages`` order (its size from the PDF's
        page tree, nothing rasterized: ``io.document.document_pages``).

        Never raises for a per-item cause: a bad item has ``None`` as its source and its
        ImageError in its plan. ``execute`` runs the result without probing again (pages are
        rendered first: ``render_documents``); the serving batcher calls ``prepare`` when a
        request arrives and ``execute`` when its batch runs.
        """
        sources, plans, _ = self._prepare(items, documents)
        return sources, plans

    def _prepare(self, items: list, documents: Sequence[Any]
                 ) -> tuple[list, list[ImagePlan], list["DocumentPlan"]]:
        """``prepare`` and each document's ``DocumentPlan`` (its pages and dpi, settled within
        its ``max_tokens``: ``plan.document.plan_document``)."""
        max_bytes = cast("decode", self.pipeline["decode"]).max_source_bytes
        sources: list = []
        sizes: list = []
        for i, item in enumerate(items):
            try:
                src = resolve(item, max_bytes, self.fetch, self.fetch_timeout_s)
            except ImageError as e:
                sources.append(None)
                sizes.append(e.at(index=i, source=describe_source(item)))
                continue
            sources.append(src)
            sizes.append(src.hw)
        doc_plans = _add_pages(self.pipeline, _document_list(documents), max_bytes, sources,
                               sizes) if documents else []
        # The headers let the plan refuse from them what decoding would cost too much
        # (decode.max_decode_bytes), before any batch is allocated.
        plans = plan_images(self.pipeline, sizes,
                            headers=[s.header if s is not None else None for s in sources])
        plans = [p if p.error is None or sources[p.index] is None
                 else _with_source(p, sources[p.index].desc) for p in plans]
        return sources, plans, doc_plans

    def _first_error(self, plans: Sequence[Any]) -> None:
        if self.errors == "raise":
            for p in plans:
                if p.error is not None:
                    raise p.error

    def prepare_videos(self, items: Sequence[Any]) -> tuple[list, list["VideoPlan"]]:
        """Probe (container metadata only, no frame decoded) and plan every video once ->
        (videos, plans): ``vlmprep.Video`` items (None for an item that is not one) and their
        ``VideoPlan`` (``plan_video`` with this Processor's ``video_options``).

        Never raises for a per-item cause: the plan's ``error`` names the item (``index`` its
        position in ``videos``); ValueError when the pipeline has no video rule.
        """
        # deferred: the video modules import numpy; an image-only Processor never loads them
        from .io.video import Video, as_video, probe_video
        opts = self._need_video_options()
        videos: list = []
        plans: list[VideoPlan] = []
        for i, item in enumerate(items):
            src = item.source if isinstance(item, Video) else item
            try:
                v = as_video(item)
                meta = probe_video(v, self.video_limits, decoder=self.video_decoder)
            except ImageError as e:
                videos.append(None)
                plans.append(VideoPlan(index=i, error=e.at(index=i, source=describe_source(src),
                                                           item="video")))
                continue
            p = plan_video(self.pipeline, meta, opts, per_item=v, index=i, limits=self.video_limits)
            if p.error is not None:
                p.error = p.error.at(index=i, source=describe_source(src), item="video")
            videos.append(v)
            plans.append(p)
        return videos, plans

    def _need_video_options(self) -> "VideoOptions":
        if self.video_options is None:
            raise ValueError(f"videos: expected a pipeline with a video rule (families "
                             f"{sorted(VIDEO_RULES)}), got {self.pipeline.name!r}; use one of "
                             f"those presets or checkpoints, or pass video_options=VideoOptions("
                             f"family=...)")
        return self.video_options

    def plan(self, images: Sequence[Any] | None = None, videos: Sequence[Any] | None = None,
             documents: Sequence[Any] | None = None) -> Plan:
        """Geometry of every image from headers only (no pixel is decoded), and of every video
        from its container metadata only (``plan.videos``: one ``VideoPlan`` per video: sampled
        ``frame_indices``, ``resized_hw``, ``grid_thw``, ``num_tokens``, ``placeholder``, ...).

        ``documents``: ``vlmprep.Document`` items; each selected page is one image plan after
        the images' (``source_hw``: its size at the document's dpi, from the PDF's page tree: no
        page rasterized).

        Returns a Plan equal to what ``self(images, videos=videos, documents=documents)``
        produces. With ``errors="raise"`` the first bad image or page (then the first bad video)
        raises ImageError; with ``"skip"`` it is recorded in its plan.
        """
        _, plans, doc_plans = self._prepare(_image_items(images, videos, documents),
                                            documents or ())
        vplans: list = self.prepare_videos(_video_list(videos))[1] if videos is not None else []
        self._first_error(plans)
        self._first_error(vplans)
        return Plan(list(plans), self.pipeline, videos=vplans, documents=doc_plans)

    # -- execution ------------------------------------------------------------------------------
    def __call__(self, images: Sequence[Any] | None = None, videos: Sequence[Any] | None = None,
                 documents: Sequence[Any] | None = None):
        """Process ``images``, ``videos`` and ``documents`` -> PackedBatch (see API.md for every
        field): the images' batch, with the videos' in ``batch.videos`` (None without
        ``videos=``). Each selected page of each ``vlmprep.Document`` is one image item after
        the images (its own cu_seqlens segment), rendered page by page before the batch runs.

        With ``errors="raise"`` a bad image, page or video raises before anything is decoded
        (a page PDFium then fails to render raises at its render).
        """
        if videos is None:
            prepared = self.prepare(_image_items(images, videos, documents), documents or ())
            return self.execute(*self.render_documents(*prepared))
        self._video_lowering()  # a backend that runs no videos refuses before anything runs
        prepared = self.prepare(_image_items(images, videos, documents), documents or ())
        vprepared = self.prepare_videos(_video_list(videos))
        self._first_error(prepared[1])
        self._first_error(vprepared[1])  # no decode before every item is known good
        batch = self.execute(*self.render_documents(*prepared))
        from dataclasses import replace
        return replace(batch, videos=self.execute_videos(*vprepared))

    def execute_videos(self, videos: Sequence[Any], plans: Sequence["VideoPlan"]) -> "PackedBatch":
        """``prepare_videos``' output -> the ``"video"`` PackedBatch (``batch.videos``): decode
        only the planned frames, resize / normalize / patchify as the family's video processor,
        by the backend's video lowering (``vlmprep.backends.video``, the one place a video's
        execution is decided). ValueError (expected / got / fix) on a backend without one."""
        run = self._video_lowering()
        self._first_error(plans)
        layout = vx.video_layout(self.pipeline)
        rows, late = [], {}
        for p in plans:
            if p.error is not None:
                continue
            try:
                rows.append(run(videos[p.index], p, self.pipeline, self.dtype,
                                self.video_limits, self.video_decoder))
            except ImageError as e:
                src = videos[p.index].source if videos[p.index] is not None else None
                err = e.at(index=p.index, source=e.source or describe_source(src), item="video")
                if self.errors == "raise":
                    raise err from (e.__cause__ or e)
                late[p.index] = err
        errors = {p.index: p.error for p in plans if p.error is not None}
        errors.update(late)
        out = vx.pack_rows(rows, self.pipeline, self.dtype, self.device)
        return pack.build_videos(out, plans, errors, self.pipeline, layout)

    def _video_lowering(self) -> Any:
        """The video lowering this Processor runs (``backends.video.lowering_for``: its backend's,
        or for ``backend="auto"`` the first usable backend's that has one), found once; ValueError
        naming the backends that run videos when its backend has none."""
        if self._video_run is None:
            vx.check_video_ops(self.pipeline)
            self._video_run = vx.lowering_for(self._backend_asked, type(self._backend).name,
                                              self.backend_name, self.device, self.match)
        return self._video_run

    def render_documents(self, sources: list, plans: list[ImagePlan]) -> tuple[list, list[ImagePlan]]:
        """``prepare``'s output with every document page rendered (``io.document.rendered``)
        into an image Source (a PDF page an ``"array"``, a TIFF frame a ``"pil"``), one page
        at a time, so that ``execute`` runs pages as the images they are; the identity without
        pages. A page that fails to render is an
        ImageError: raised with ``errors="raise"``, else recorded in its plan."""
        if not any(s is not None and s.kind == "page" for s in sources):
            return sources, plans
        self._first_error(plans)  # no render before every item is known good
        from .io.document import rendered  # deferred: numpy and pypdfium2
        sources, plans = list(sources), list(plans)
        for k, s in enumerate(sources):
            if s is None or s.kind != "page" or plans[k].error is not None:
                continue
            try:
                sources[k] = rendered(s)
            except ImageError as e:
                err = e.at(index=k, source=s.desc)
                if self.errors == "raise":
                    raise err from (e.__cause__ or e)
                sources[k] = None
                plans[k] = ImagePlan(index=k, source_hw=plans[k].source_hw, error=err)
        return sources, plans

    def stream(self, document: Any, pages_per_batch: int = 1) -> Iterator["PackedBatch"]:
        """One ``vlmprep.Document`` (or a PDF path / bytes) -> an iterator of PackedBatch, one
        per group of ``pages_per_batch`` selected pages in its ``pages`` order. Part ``g`` equals
        ``self(documents=[Document(source, pages=<group g>, dpi=..., ...)])``; while it runs the
        next group is rendered (in the render worker: the two overlap), so memory is bounded by
        two groups, however long the document.

        The whole document is planned here, once, from its page tree (nothing rasterized):
        with ``errors="raise"`` a bad page (or document) raises from this call, before any page
        is rendered; with ``"skip"`` a bad page is an error of its part, and a cause of the
        whole document (not a PDF, damaged, too many pages) is one part carrying it. An empty
        ``pages=`` yields nothing.
        """
        if isinstance(document, (list, tuple)):
            raise TypeError(f"stream: expected one vlmprep.Document (or a PDF path / bytes), got "
                            f"a {type(document).__name__} of {len(document)}; call stream once "
                            f"per document, or proc(documents=[...]) for them all at once")
        n = pages_per_batch
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"stream(pages_per_batch=...): expected an int >= 1, got {n!r}; "
                             f"pass e.g. pages_per_batch=8")
        sources, plans = self.prepare([], _document_list([document]))
        self._first_error(plans)  # every page known good before the first render
        return self._stream_parts(sources, plans, n)

    def _stream_parts(self, sources: list, plans: list[ImagePlan], n: int
                      ) -> Iterator["PackedBatch"]:
        """Part by part, the next group rendered while this one runs: a PDF page renders in a
        worker process (``io.page_render``), so its render overlaps this process's resize and
        normalize instead of adding to them. At most two groups' pages are alive: the one
        running and the next."""
        from concurrent.futures import ThreadPoolExecutor
        groups = [(a, min(a + n, len(plans))) for a in range(0, len(plans), n)]
        if not groups:
            return
        with ThreadPoolExecutor(1, thread_name_prefix="vlmprep-render") as ahead:
            queue = [ahead.submit(self._rendered, sources, plans, *groups[0])]
            for g in range(len(groups)):
                if g + 1 < len(groups):
                    queue.append(ahead.submit(self._rendered, sources, plans, *groups[g + 1]))
                # popped into a call: group g's pages die with it, not held across the yield
                yield self._run_part(queue.pop(0))

    def _rendered(self, sources: list, plans: list[ImagePlan], a: int, b: int) -> tuple:
        return self.render_documents(sources[a:b], [_shifted(p, a) for p in plans[a:b]])

    def _run_part(self, rendered: Any) -> "PackedBatch":
        # a render error of this group raises here, as this part's
        return self.execute(*rendered.result())

    def execute(self, sources: Sequence[Any], plans: Sequence[ImagePlan]):
        """``prepare``'s output -> PackedBatch, without probing again (the Batcher plans a
        request when it arrives and runs it later through this).

        ``plans[k].index`` must be ``k``.
        """
        import torch

        self._first_error(plans)  # raise before any decode: no partial state
        order = self.pipeline.patchify.order
        total = sum(p.rows(order) for p in plans if p.error is None)
        if order == "tiles":
            shape = (total, 3, *self.pipeline.tile_hw)  # type: ignore[misc]
        else:
            shape = (total, row_length(self._backend.pipeline.patchify))  # its row form's width
        # on the CPU a cached buffer: a fresh one costs more to fault in
        out = kernels.empty(shape, getattr(torch, self.dtype), self.device)
        late = self._backend.run(sources, plans, out)
        if late:
            if self.errors == "raise":
                raise late[min(late)]
            out = _drop_rows(out, plans, late, order)
        errors = {p.index: p.error for p in plans if p.error is not None}
        errors.update(late)
        return pack.build(out, plans, errors, self.pipeline, self.row_form)


def _image_items(images: Any, videos: Any, documents: Any) -> list:
    """``images=`` as a list; None is no images when videos or documents are given."""
    if images is None and (videos is not None or documents is not None):
        return []
    return as_image_list(images)


def _document_list(documents: Any) -> list:
    """``documents=`` as a list of ``vlmprep.Document`` (a bare path or bytes is wrapped with
    the defaults); one Document alone is refused, as one video is."""
    from .io.document import Document  # deferred: keeps an image-only call off the PDF module
    if not isinstance(documents, (list, tuple)):
        raise TypeError(f"documents: expected a list of vlmprep.Document (or PDF paths / bytes), "
                        f"got {type(documents).__name__}; wrap one document in a list: "
                        f"documents=[doc]")
    return [d if isinstance(d, Document) else Document(d) for d in documents]


def _add_pages(pipeline: Pipeline, documents: list, max_bytes: int, sources: list,
               sizes: list) -> list["DocumentPlan"]:
    """Append each document's pages to ``sources`` / ``sizes`` (``prepare``'s lists): a page
    Source and its size, or None and the page's (or the document's) ImageError; the pages and
    dpi are each document's plan's (``plan_document``: within its ``max_tokens``). Returns the
    documents' plans."""
    from .plan.document import plan_document  # deferred: the PDF module
    out = []
    for d, doc in enumerate(documents):
        entries, dplan = plan_document(pipeline, doc, d, max_bytes)
        out.append(dplan)
        for page in entries:
            if isinstance(page, ImageError):
                sources.append(None)
                sizes.append(page.at(index=len(sizes)))
            else:
                sources.append(page)
                sizes.append(page.hw)
    return out


def _video_list(videos: Any) -> list:
    """``videos=`` as a list of items: a list / tuple as is; one ``vlmprep.Video``, path or bytes
    alone is refused (a THWC array alone would read as frames of frames)."""
    if isinstance(videos, (list, tuple)):
        return list(videos)
    raise TypeError(f"videos: expected a list of videos (paths, bytes, frame arrays or "
                    f"vlmprep.Video), got {type(videos).__name__}; wrap one video in a list: "
                    f"videos=[v]")


def _video_settings(pipe: Pipeline, options: Any, limits: Any, decoder: str
                    ) -> tuple[Any, "VideoLimits", str]:
    """(video_options, video_limits, video_decoder), checked; options None -> the family's
    checkpoint defaults, or None for a pipeline without a video rule."""
    # deferred: the video modules import numpy; an image-only Processor never loads them
    from .io.video import VideoLimits, limits_of
    from .io.video.decode import resolve_decoder
    if options is None:  # the family's checkpoint defaults, as its preset module declares them
        options = (presets.video_defaults(pipe.name) if pipe.name in presets.video_families()
                   else None)
    elif not isinstance(options, VideoOptions):
        raise TypeError(f"video_options: expected None or a vlmprep.plan.video.VideoOptions, got "
                        f"{type(options).__name__}; build one with vlmprep.presets.video_defaults("
                        f"family) and dataclasses.replace")
    if limits is not None and not isinstance(limits, VideoLimits):
        raise TypeError(f"video_limits: expected None or a vlmprep.io.video.VideoLimits, got "
                        f"{type(limits).__name__}")
    resolve_decoder(decoder)  # ValueError for an unknown or unusable decoder
    return options, (limits if limits is not None else limits_of(pipe["decode"])), decoder


def _video_config(path: Any, cfg_path: Path, **hub: Any) -> dict | None:
    """``video_preprocessor_config.json`` beside the image config (a local folder or file: its
    sibling; a hub id: the repo's, when it has one), or None."""
    import json
    folder = Path(cfg_path) if Path(cfg_path).is_dir() else Path(cfg_path).parent
    p = folder / "video_preprocessor_config.json"
    if not p.is_file() and not Path(path).exists():
        try:
            from huggingface_hub import hf_hub_download
            p = Path(hf_hub_download(os.fspath(path), "video_preprocessor_config.json",
                                     revision=hub["revision"],
                                     cache_dir=None if hub["cache_dir"] is None
                                     else os.fspath(hub["cache_dir"]),
                                     local_files_only=hub["local_files_only"], token=hub["token"]))
        except Exception:  # noqa: BLE001 (no video config in the repo / cache: the image one serves)
            return None
    if not p.is_file():
        return None
    with open(p, encoding="utf-8") as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    return cfg


def _overrides(pipe: Pipeline) -> list[tuple[str, Any]]:
    """(field, value) of ``pipe`` where it differs from the preset it is named after, as
    ``Processor(...)`` keywords (``op__field`` when several ops have the field); ops added or
    removed show as ``ops=[...]``. Empty for a custom name."""
    if pipe.name not in presets.names():
        return []
    base = presets.get(pipe.name)
    mine, theirs = [o.name for o in pipe], [o.name for o in base]
    if mine != theirs:
        return [("ops", mine)]
    out: list[tuple[str, Any]] = []
    for a, b in zip(pipe, base):
        for f in a.field_names():
            if getattr(a, f) != getattr(b, f):
                shared = sum(f in o.field_names() for o in pipe) > 1
                out.append((f"{a.name}__{f}" if shared else f, getattr(a, f)))
    return out


def _hub_unreachable(endpoint: str, timeout_s: float = 3.0) -> str | None:
    """Why the hub at ``endpoint`` cannot be reached (its host name does not resolve), else None
    (it resolves, a proxy is set and resolves names for us, or the lookup is still running after
    ``timeout_s``). huggingface_hub retries a failed connection five times with back-off, about
    24 s, before it reports it: this one lookup answers at once."""
    import socket
    import threading
    import urllib.parse
    import urllib.request
    host = urllib.parse.urlsplit(endpoint).hostname
    if not host or urllib.request.getproxies():
        return None
    out: list[OSError] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        except OSError as e:
            out.append(e)

    t = threading.Thread(target=look, name="vlmprep-hub-lookup", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive() or not out or not isinstance(out[0], socket.gaierror):
        return None
    return f"{host} does not resolve: {out[0].strerror or out[0]}"


def _config_file(path: str | os.PathLike, *, revision: str | None,
                 cache_dir: str | os.PathLike | None, local_files_only: bool,
                 token: str | bool | None) -> tuple[Path, bool]:
    """A local folder / json file as is; a hub repo id -> the cached or downloaded file. Also
    whether later hub lookups must stay in the cache (asked, or the hub is unreachable)."""
    p = Path(path)
    name = os.fspath(path)
    if p.exists() or not isinstance(name, str) or not _REPO_ID.match(name) \
            or name.endswith(".json"):
        if not p.exists():
            raise ConfigNotFoundError(
                f"expected a checkpoint folder holding preprocessor_config.json (or "
                f"processor_config.json), the json file itself, or a hub repo id 'Org/Name', got "
                f"{name!r} (no such file or folder); "
                f"check the path (vlmprep never downloads for a local path)")
        return p, local_files_only
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub import errors as hub_errors
    except ImportError as e:
        raise ConfigNotFoundError(
            f"expected a local checkpoint folder or a hub repo id with huggingface_hub installed, "
            f"got repo id {name!r} and no huggingface_hub; pip install huggingface_hub, or "
            f"download the checkpoint and pass its folder") from e
    offline = local_files_only or constants.is_offline_mode()
    # Unreachable: the cache only (as hf_hub_download itself falls back to it), without its retries
    down = None if offline else _hub_unreachable(constants.ENDPOINT)
    where = "the local cache (offline: HF_HUB_OFFLINE=1 or local_files_only)" if offline \
        else f"the Hugging Face Hub ({constants.ENDPOINT})"
    cache = os.fspath(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    rev = f" at revision {revision!r}" if revision else ""
    get = f"hf download {name} preprocessor_config.json" + (f" --revision {revision}" if revision
                                                            else "")
    try:
        return _download_config(hf_hub_download, hub_errors.EntryNotFoundError, name,
                                revision=revision,
                                cache_dir=None if cache_dir is None else os.fspath(cache_dir),
                                local_files_only=local_files_only or down is not None,
                                token=token), local_files_only or down is not None
    except hub_errors.GatedRepoError as e:
        got, fix = "a gated repo", "accept its terms on the hub and pass token= (or log in)"
        err: Exception = e
    except hub_errors.RepositoryNotFoundError as e:
        got, fix = "no such repo (or a private one)", "check the id, or pass token= for a " \
            "private repo"
        err = e
    except hub_errors.HFValidationError as e:
        got, fix = f"an id the hub refuses ({e})".splitlines()[0][:200], \
            "check the id ('Org/Name'), or pass a local folder"
        err = e
    except hub_errors.RevisionNotFoundError as e:
        got, fix = f"no revision {revision!r}", "check revision="
        err = e
    except hub_errors.EntryNotFoundError as e:  # remote: not in the repo; local: not cached
        if down is not None:
            got = f"the hub unreachable ({down}) and no cached copy in {cache}"
            fix = (f"check the network (HF_ENDPOINT, HTTPS_PROXY), or download it where the hub "
                   f"is reachable ({get}), or pass a local checkpoint folder")
        elif offline or isinstance(e, FileNotFoundError):
            got = f"no cached copy in {cache}"
            fix = f"download it once online ({get}), or pass a local checkpoint folder"
        else:
            got, fix = "a repo without preprocessor_config.json", \
                "check that it is a vision-language checkpoint, or pass a local config"
        err = e
    except (OSError, hub_errors.HfHubHTTPError) as e:  # network down and not cached, ...
        got, fix = f"{type(e).__name__}: {e}".splitlines()[0][:200], \
            "check the network, or set HF_HUB_OFFLINE=1 with a cached copy, or pass a local folder"
        err = e
    # "Org/Name" is a relative path too: say that no such folder was found either
    raise ConfigNotFoundError(
        f"expected preprocessor_config.json of hub repo {name!r}{rev} from {where}, or a local "
        f"checkpoint folder {name!r}, got {got}, and no local folder {os.path.abspath(name)} "
        f"(it does not exist); fix: {fix}") from err


def _download_config(download: Any, not_found: type[BaseException], name: str, **kw: Any) -> Path:
    """The repo's ``preprocessor_config.json``, else transformers 5's ``processor_config.json``
    (the image processor nested in it: ``presets.load_config`` reads either); the first file's
    not-found error when neither is there."""
    try:
        return Path(download(name, "preprocessor_config.json", **kw))
    except not_found as first:
        try:
            return Path(download(name, "processor_config.json", **kw))
        except not_found:
            raise first from None


def _shifted(p: ImagePlan, a: int) -> ImagePlan:
    """Plan ``p`` of a document as the plan of its group starting at item ``a`` (``execute``
    wants ``plans[k].index == k``; errors name the item as the group's own call would)."""
    from dataclasses import replace
    err = p.error
    if err is not None and err.index is not None:
        err = ImageError(err.reason, index=err.index - a, source=err.source, item=err.item)
    return replace(p, index=p.index - a, error=err)


def _with_source(p: ImagePlan, desc: str) -> ImagePlan:
    from dataclasses import replace
    err = p.error
    return replace(p, error=err.at(source=desc) if err is not None else None)


def _drop_rows(out, plans: Sequence[ImagePlan], failed: dict[int, ImageError], order: str):
    """``out`` without the rows of images that failed during decode (rare path: one copy)."""
    import torch
    keep, row = [], 0
    for p in plans:
        if p.error is not None:
            continue
        n = p.rows(order)
        if p.index not in failed:
            keep.append(torch.arange(row, row + n))
        row += n
    idx = torch.cat(keep) if keep else torch.zeros(0, dtype=torch.int64)
    return out[idx.to(out.device)]
