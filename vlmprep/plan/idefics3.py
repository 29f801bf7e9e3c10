"""Idefics3 / SmolVLM geometry (``idefics3_tile``): two resizes, a row-major split, a global image.

Reproduces ``transformers.models.idefics3.image_processing_pil_idefics3`` (SmolVLM's is the same
code under other names) and the prompt string of ``Idefics3Processor.replace_image_token``.

Tile order, a tiny example::

    Given  1080x1920 (HxW), longest_edge 1820, tile 364
    Input  resize 1: long side -> 1820, short int(1820 / (1920/1080)) = 1023, odd -> 1024
           resize 2: 1092x1820 (each side up to a multiple of 364, from the resize-1 image)
    Output tiles row-major r1c1 .. r1c5, r2c1 .. r3c5 (15 boxes of 364x364 in the 1092x1820
           canvas), then the global image: the 1092x1820 canvas squashed to 364x364 (16 tiles)
"""
from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Sequence

from ..errors import ImageError
from ..ops import idefics3_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, count_embeddings, sizing_rule
from .video import Clip, VideoOptions, VideoPlan, check_budget, video_rule

if TYPE_CHECKING:
    from .video import VideoMetaLike

__all__ = ["rescale_to_longest_edge", "resize_to_tiles", "split_grid", "num_image_tokens",
           "placeholder", "FAKE_TOKEN", "GLOBAL_TAG", "english_number", "smolvlm_num_frames",
           "smolvlm_video_indices", "smolvlm_sampling", "video_placeholder", "SKIP_SECS", "SMOLVLM_FPS",
           "SMOLVLM_MAX_FRAMES"]

FAKE_TOKEN = "<fake_token_around_image>"
GLOBAL_TAG = "<global-img>"


def rescale_to_longest_edge(height: int, width: int, longest_edge: int, max_edge: int = 4096
                            ) -> tuple[int, int]:
    """Resize 1 -> ``(h, w)``: the long side becomes ``longest_edge`` (up or down), the short side
    ``int(long / aspect)`` rounded up to even, at least 1; then capped at ``max_edge``.

    transformers' ``_resize_output_size_rescale_to_max_len`` then
    ``_resize_output_size_scale_below_upper_bound`` (its ``MAX_IMAGE_SIZE`` is 4096), float
    expressions kept as written there (``W / (W / H)`` is not always H).

    Given 1080x1920, 1820 -> (1024, 1820); 17x900 -> (34, 1820); 1x1 -> (1820, 1820).
    """
    aspect = width / height
    if width >= height:
        width = longest_edge
        height = int(width / aspect)
        if height % 2:
            height += 1
    else:
        height = longest_edge
        width = int(height * aspect)
        if width % 2:
            width += 1
    height, width = max(height, 1), max(width, 1)
    # Second step: only a long side above max_edge changes anything (no even-rounding here).
    aspect = width / height
    if width >= height and width > max_edge:
        width = max_edge
        height = int(width / aspect)
    elif height > width and height > max_edge:
        height = max_edge
        width = int(height * aspect)
    return max(height, 1), max(width, 1)


def resize_to_tiles(height: int, width: int, tile_size: int) -> tuple[int, int]:
    """Resize 2 -> ``(h, w)``, both multiples of ``tile_size``, from the resize-1 size.

    The long side goes up to a multiple; the short side is ``int(new_long / aspect)`` taken up to
    a multiple (transformers' ``resize_for_vision_encoder``; ``int`` of a float quotient, which
    can be one below the exact value, as written there).

    Given 1024x1820, 364 -> (1092, 1820); 34x1820 -> (364, 1820).
    """
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile_size) * tile_size
        height = math.ceil(int(width / aspect) / tile_size) * tile_size
    else:
        height = math.ceil(height / tile_size) * tile_size
        width = math.ceil(int(height * aspect) / tile_size) * tile_size
    return height, width


def split_grid(height: int, width: int, tile_size: int) -> tuple[int, int]:
    """``(rows, cols)`` of the split of a resize-2 canvas; ``(0, 0)`` when it is one tile
    (transformers then keeps the image alone, with no global copy)."""
    if height > tile_size or width > tile_size:
        return (height - tile_size) // tile_size + 1, (width - tile_size) // tile_size + 1
    return 0, 0


def num_image_tokens(rows: int, cols: int, image_seq_len: int) -> int:
    """LLM tokens of one image, as ``Idefics3Processor._get_num_multimodal_tokens`` with a tokenizer
    that merges ``"\\n\\n"`` into one token (Llama 3's and SmolLM2's both do):
    ``rows * (cols * (S + 2) + 1) + S + 3``; ``S + 3`` unsplit.

    Given 3x5, S = 169 -> 2740; 0x0 -> 172.
    """
    return rows * (cols * (image_seq_len + 2) + 1) + image_seq_len + 3


def placeholder(rows: int, cols: int, image_seq_len: int, image_token: str = "<image>") -> str:
    """The exact prompt string ``Idefics3Processor`` puts for one image.

    Given 1x2, S = 2 -> ``<fake_token_around_image><row_1_col_1><image><image>``
    ``<fake_token_around_image><row_1_col_2><image><image>\\n``
    ``\\n<fake_token_around_image><global-img><image><image><fake_token_around_image>``.
    """
    seq = image_token * image_seq_len
    glob = FAKE_TOKEN + GLOBAL_TAG + seq + FAKE_TOKEN
    if rows == 0 and cols == 0:
        return glob
    out = "".join("".join(f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>{seq}" for c in range(cols)) + "\n"
                  for r in range(rows))
    return out + "\n" + glob


@sizing_rule("idefics3_tile")
def _idefics3_tile(op: idefics3_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """Canvases: 0 = resize 1 of the source; 1 = canvas 0 resized to tile multiples (split) or
    squashed to ``tile_size`` (no split); 2 = canvas 1 squashed to ``tile_size`` (the global image,
    only when split into more than one tile). Every resize is from the previous canvas, as
    transformers chains them (LANCZOS twice is not LANCZOS once)."""
    t = op.tile_size
    h1, w1 = rescale_to_longest_edge(hw[0], hw[1], op.longest_edge, op.max_edge)
    rows = cols = 0
    if op.split:
        h2, w2 = resize_to_tiles(h1, w1, t)
        rows, cols = split_grid(h2, w2, t)
    else:
        h2, w2 = t, t
    canvases = [Canvas((h1, w1)), Canvas((h2, w2), parent=0)]
    tiles = grid_boxes(rows, cols, t)
    tile_canvas = [1] * len(tiles)
    if tiles:
        canvases.append(Canvas((t, t), parent=1))
        tile_canvas.append(2)
    else:
        tile_canvas.append(1)  # h2 == w2 == t here
    tiles.append((0, 0, t, t))
    return Sizing(canvases, tiles, tile_canvas,
                  image_tokens=num_image_tokens(rows, cols, op.image_seq_len),
                  placeholder=placeholder(rows, cols, op.image_seq_len, pipeline.pack.image_token),
                  resized_hw=(h2, w2))


# -- video (SmolVLM / SmolVLM2) ----------------------------------------------------------------
# transformers 5.24: models/smolvlm/video_processing_smolvlm.py (SmolVLMVideoProcessor) and
# processing_smolvlm.py (SmolVLMProcessor.replace_video_token). Idefics3Processor has no video:
# this rule is SmolVLM's, planned with the pipeline's geometry (longest_edge, tile M, S).
#   Sampling (do_sample_frames; SmolVLM2's video_sampling: fps 1, max_frames 64 -> the processor's
#   fps / num_frames; on by default here because SmolVLMProcessor.apply_chat_template always
#   passes them, which turns sampling on): desired = max(1, min(round(fps * duration), num_frames));
#   when duration - 2 > num_frames * fps the first and last second are skipped (frames
#   int(src_fps) .. int(total - src_fps)); indices np.unique(np.linspace(first, last, desired,
#   dtype=int)) (so fewer than desired when the clip is short). An unknown source fps is an error.
#   Resize: long side -> min(longest_edge, 4096), short side int(.) rounded up to even (as the
#   image rule's resize 1), then squashed to M x M (never split).
#   Prompt: "You are provided the following series of {n in words} frames from a {H:MM:SS} video.\n"
#   + per frame "\nFrame from {MM:SS}:<fake_token_around_image><global-img>" + "<image>" * S +
#   "<fake_token_around_image>", + "\n\n"; times int(index / src_fps) (src_fps 24 when unknown,
#   frames not sampled), duration int(duration) (int(last time) when unknown).
#   Output: pixel_values (1, n, 3, M, M) and pixel_attention_mask (1, n, M, M) (SmolVLM's keys);
#   a batch is padded to its longest video and the processor then writes that padded count in
#   every video's "{n in words}" (a transformers quirk; a plan is per video: its own n).
# num_tokens counts the special tokens (n * (S + 3)); the intro, the timestamps and the newlines
# are text whose token count depends on the tokenizer. A start/end window's duration is its own
# (count / fps); its timestamps are the source's.
#: Seconds skipped at both ends of a long clip (SmolVLMVideoProcessor.sample_frames' skip_secs).
SKIP_SECS = 1
#: SmolVLM2 checkpoints' ``video_sampling``: fps 1, max_frames 64 (the processor's fps / num_frames).
SMOLVLM_FPS = 1.0
SMOLVLM_MAX_FRAMES = 64
_VIDEO_INTRO = ("You are provided the following series of {frame_count} frames from a "
                "{video_duration} [H:MM:SS] video.\n")
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def english_number(n: int) -> str:
    """``num2words(n)`` (English cardinal) for ``0 <= n < 10**6``, as SmolVLM's prompt spells
    the frame count. Given 21 -> "twenty-one"; 101 -> "one hundred and one"; 1234 -> "one
    thousand, two hundred and thirty-four"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{_ONES[n // 100]} hundred" + (f" and {english_number(n % 100)}" if n % 100 else "")
    if n < 10 ** 6:
        rest = n % 1000
        tail = "" if rest == 0 else (f" and {english_number(rest)}" if rest < 100
                                     else f", {english_number(rest)}")
        return f"{english_number(n // 1000)} thousand{tail}"
    raise ValueError(f"english_number: expected 0 <= n < 10**6, got {n}")


def smolvlm_sampling(opts: VideoOptions) -> tuple[float, int]:
    """``(fps, num_frames)`` SmolVLM samples with: the options', each None falling back to SmolVLM2's
    ``video_sampling`` (``SMOLVLM_FPS``, ``SMOLVLM_MAX_FRAMES``), as ``sample_frames`` falls back to
    the processor's own values (so ``Video(src, fps=2)`` keeps the 64-frame cap)."""
    return (opts.fps if opts.fps is not None else SMOLVLM_FPS,
            opts.num_frames if opts.num_frames is not None else SMOLVLM_MAX_FRAMES)


def smolvlm_num_frames(duration: float, opts: VideoOptions) -> int:
    """Frames SmolVLM asks for: ``max(1, min(round(fps * duration), num_frames))`` (before the
    unique of the linspace); ``duration``: seconds of the clip. Given 10 s, fps 1, 64 -> 10."""
    fps, num = smolvlm_sampling(opts)
    return max(1, min(int(round(fps * duration)), num))


def smolvlm_video_indices(count: int, src_fps: float, duration: float, desired: int,
                          opts: VideoOptions) -> list[int]:
    """``SmolVLMVideoProcessor.sample_frames``' indices (0-based in a clip of ``count`` frames):
    skip ``SKIP_SECS`` at both ends of a long clip, then ``np.unique(np.linspace(first, last,
    desired, dtype=int))``. Given 300 frames, 30 fps, 10 s, desired 10 -> [0, 33, 66, 99, 132,
    166, 199, 232, 265, 299]."""
    import numpy as np
    first, last = 0, count - 1
    fps, num = smolvlm_sampling(opts)
    if SKIP_SECS > 0 and (duration - 2 * SKIP_SECS) > (num * fps):
        first = int(SKIP_SECS * src_fps)
        last = int(count - SKIP_SECS * src_fps)
    first, last = max(0, first), min(last, count - 1)
    if first >= last:
        first, last = 0, count - 1
    return [int(v) for v in np.unique(np.linspace(first, last, desired, dtype=int))]


def video_placeholder(times: list[float], duration: int, image_seq_len: int,
                      image_token: str = "<image>") -> str:
    """``SmolVLMProcessor.replace_video_token``'s string for frames at ``times`` (seconds) of a
    ``duration``-second video. Given [0.0, 61.5], 62 s, S = 1 -> "You are provided the following
    series of two frames from a 0:01:02 [H:MM:SS] video.\\n\\nFrame from 00:00:<fake..><global-img>
    <image><fake..>\\nFrame from 01:01:...\\n\\n"."""
    frame = FAKE_TOKEN + GLOBAL_TAG + image_token * image_seq_len + FAKE_TOKEN
    out = [_VIDEO_INTRO.format(frame_count=english_number(len(times)),
                               video_duration=str(timedelta(seconds=int(duration))))]
    for t in times:
        out.append(f"\nFrame from {int(t // 60):02d}:{int(t % 60):02d}:" + frame)
    out.append("\n\n")
    return "".join(out)


@video_rule("idefics3")
def _smolvlm_video(pipeline: Pipeline, meta: "VideoMetaLike", opts: VideoOptions, clip: Clip,
                   index: int) -> VideoPlan:
    """Frames as SmolVLM samples them, each resized to the long edge then squashed to M x M."""
    if opts.sampling != "transformers":
        raise ImageError(f"video: idefics3/smolvlm expected sampling='transformers' (the only "
                         f"rule implemented for this family), got {opts.sampling!r}; drop it")
    op = pipeline.sizing
    if not isinstance(op, idefics3_tile):
        raise ImageError(f"video: idefics3 expected an idefics3_tile pipeline, got {op.name!r}; "
                         f"plan with the idefics3 preset or a SmolVLM checkpoint")
    m, p, seq = op.tile_size, pipeline.patchify.patch_size, op.image_seq_len
    side = m // p
    whole = clip.first == 0 and clip.count == meta.total_num_frames
    fps = clip.fps
    # seconds of the clip: the container's duration for the whole video (what transformers reads)
    duration = None if fps is None else (float(meta.duration) if whole else clip.count / fps)
    n = clip.count
    if opts.do_sample_frames:
        if fps is None or duration is None:
            raise ImageError("video: expected a known source fps (SmolVLM samples by time), got "
                             "fps 0 (unknown); pass Video(source_fps=...) or sample nothing")
        n = smolvlm_num_frames(duration, opts)
    check_budget(n, meta, clip.limits, n * side * side, 3 * p * p)
    rel: Sequence[int] = range(clip.count)
    if opts.do_sample_frames and fps is not None and duration is not None:
        rel = smolvlm_video_indices(clip.count, fps, duration, n, opts)
    idx = [clip.first + i for i in rel]
    rate = fps if fps is not None else 24.0  # the processor's fallback for an unknown fps
    times = [i / rate for i in idx]
    dur = int(times[-1]) if duration is None else int(duration)
    text = video_placeholder(times, dur, seq, pipeline.pack.image_token)
    n = len(idx)
    tokens = n * (seq + 3)
    return VideoPlan(
        index=index, meta=meta, frame_indices=idx,
        timestamps=times if fps is not None else [],
        resized_hw=(m, m), grid_thw=[(1, side, side)] * n, num_patches=n * side * side,
        num_tokens=tokens, num_embeddings=count_embeddings(text, pipeline.pack.image_token, tokens),
        placeholder=text,
        first_resize_hw=rescale_to_longest_edge(meta.height, meta.width,
                                                min(op.longest_edge, 4096), 4096))
