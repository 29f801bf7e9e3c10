"""The decode-only floor: every image decoder the dependencies provide, decode only.

Each decoder turns encoded bytes into a uint8 ``(H, W, 3)`` RGB array on the CPU, on one thread.
The input is prepared outside the timed call (a numpy view or a torch tensor of the bytes), so
the floor is the decoder's own cost. The fastest decoder's time is the floor that vlmprep's
per-image time is compared with (``ratio_vs_decode_floor``).
"""
from __future__ import annotations

import io
from typing import Any, Callable

__all__ = ["DECODERS", "prepare"]

#: decoder name -> what it runs
DECODERS = {
    "pil": "PIL.Image.open(...).convert('RGB') + numpy.asarray",
    "opencv": "cv2.imdecode(..., IMREAD_COLOR_RGB)",
    "torchvision": "torchvision.io.decode_image(..., mode=RGB) on the CPU",
    "dali_cpu": "nvidia.dali fn.decoders.image(device='cpu'), batch 1, one thread",
}


def _pil() -> Callable[[bytes], Callable[[], Any]]:
    import numpy as np
    from PIL import Image

    def prep(data: bytes):
        return lambda: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return prep


def _opencv() -> Callable[[bytes], Callable[[], Any]]:
    import cv2
    import numpy as np
    flag = getattr(cv2, "IMREAD_COLOR_RGB", None)

    def prep(data: bytes):
        buf = np.frombuffer(data, np.uint8)
        if flag is not None:
            return lambda: cv2.imdecode(buf, flag)
        return lambda: cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return prep


def _torchvision() -> Callable[[bytes], Callable[[], Any]]:
    import warnings

    import torch
    # torchvision 0.29 warns on every decode that TorchCodec supersedes it; it still decodes.
    warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of "
                            "TorchVision are deprecated", category=DeprecationWarning)
    from torchvision.io import ImageReadMode, decode_image

    def prep(data: bytes):
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return lambda: decode_image(t, mode=ImageReadMode.RGB)
    return prep


def _dali_cpu() -> Callable[[bytes], Callable[[], Any]]:
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, exec_async=False,
                  exec_pipelined=False, prefetch_queue_depth=1)
    def graph():
        x = fn.external_source(name="x", dtype=types.UINT8)
        return fn.decoders.image(x, device="cpu", output_type=types.RGB)

    pipe = graph()
    pipe.build()

    def run(buf):
        pipe.feed_input("x", [buf])
        (out,) = pipe.run()
        return np.asarray(out[0])

    def prep(data: bytes):
        buf = np.frombuffer(data, np.uint8)
        return lambda: run(buf)
    return prep


_MAKERS = {"pil": _pil, "opencv": _opencv, "torchvision": _torchvision, "dali_cpu": _dali_cpu}


def prepare(items: list[bytes], hws: list[tuple[int, int]]
            ) -> tuple[dict[str, list[Callable[[], Any]]], dict[str, str]]:
    """For every decoder that works here: one zero-argument call per item that decodes it.

    Returns ``(calls, unavailable)``: ``calls[name][i]`` decodes ``items[i]``; ``unavailable``
    says why a decoder was left out (not installed, failed, or gave the wrong shape).
    """
    calls: dict[str, list[Callable[[], Any]]] = {}
    unavailable: dict[str, str] = {}
    for name, make in _MAKERS.items():
        try:
            prep = make()
            fns = [prep(b) for b in items]
            for f, hw in zip(fns, hws):
                shape = tuple(f().shape)
                # any axis order (HWC or CHW; EXIF-rotated by some decoders, not others)
                if sorted(shape) != sorted((hw[0], hw[1], 3)):
                    raise ValueError(f"decoded shape {shape}, expected {hw[0]}x{hw[1]}x3")
        except ImportError as e:
            unavailable[name] = f"not installed ({e.name or e})"
            continue
        except Exception as e:  # a decoder that cannot read these files is left out, with why
            unavailable[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        calls[name] = fns
    return calls, unavailable
