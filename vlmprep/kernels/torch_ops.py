"""Fake (meta) implementations of torch.ops.vlmprep.*: shapes without running a kernel, so
torch.compile, FakeTensor and opcheck work without a GPU. (``empty_host`` has no tensor
arguments: its catch-all kernel serves every dispatch key.)"""
from __future__ import annotations

import torch


@torch.library.register_fake("vlmprep::normalize_patchify")
def _normalize_patchify_fake(images, lut, out, offsets, order, patch_size, merge_size,
                             temporal_patch_size, num_threads=1):
    return None  # writes into `out` only


@torch.library.register_fake("vlmprep::resize")
def _resize_fake(image, height, width, interpolation, num_threads=1, match="pillow"):
    return image.new_empty((height, width, 3))



@torch.library.register_fake("vlmprep::resize_normalize_patchify")
def _resize_normalize_patchify_fake(image, height, width, interpolation, lut, out, offset, order,
                                    patch_size, merge_size, temporal_patch_size, num_threads=1,
                                    match="pillow"):
    return None  # writes into `out` only


@torch.library.register_fake("vlmprep::decode_resize_normalize_patchify")
def _decode_resize_normalize_patchify_fake(data, src_h, src_w, height, width, interpolation, lut,
                                           out, offset, order, patch_size, merge_size,
                                           temporal_patch_size, num_threads=1, match="pillow"):
    return None  # writes into `out` only


@torch.library.register_fake("vlmprep::decode_jpeg")
def _decode_jpeg_fake(data, src_h, src_w):
    return data.new_empty((src_h, src_w, 3))


@torch.library.register_fake("vlmprep::stream_store")
def _stream_store_fake(out, value=0):
    return None  # writes into `out` only


@torch.library.register_fake("vlmprep::decode_resize")
def _decode_resize_fake(data, src_h, src_w, boxes, sizes, interpolation, num_threads=1, match="pillow"):
    return [data.new_empty((sizes[2 * k], sizes[2 * k + 1], 3)) for k in range(len(sizes) // 2)]
