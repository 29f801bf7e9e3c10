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

from ..ops import idefics3_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["rescale_to_longest_edge", "resize_to_tiles", "split_grid", "num_image_tokens",
           "placeholder", "FAKE_TOKEN", "GLOBAL_TAG"]

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
