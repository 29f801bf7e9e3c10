"""The decode-only floor: every image decoder the dependencies provide, decode only.

Each decoder turns encoded bytes into a uint8 ``(H, W, 3)`` RGB array on the CPU, on one thread
(and, for a CUDA benchmark, also into device memory with nvJPEG: ``torchvision_cuda``,
``dali_mixed``).
The input is prepared outside the timed call (a numpy view or a torch tensor of the bytes), so
the floor is the decoder's own cost. The fastest decoder's time is the floor that vlmprep's
per-image time is compared with (``ratio_vs_decode_floor``).
"""
from __future__ import annotations

import functools
import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from .. import kernels
from ..io.probe import probe

__all__ = ["DECODERS", "prepare"]

#: decoder name -> what it runs
DECODERS = {
    "pil": "PIL.Image.open(...).load() (decode only; no RGB conversion or array copy)",
    "opencv": "cv2.imdecode(..., IMREAD_COLOR_RGB)",
    "torchvision": "torchvision.io.decode_image(..., mode=RGB) on the CPU",
    "dali_cpu": "nvidia.dali fn.decoders.image(device='cpu'), batch 1, one thread",
    "vlmprep": "vlmprep.kernels.decode_jpeg (libjpeg-turbo, the JPEG fast path's decoder; JPEG only)",
    "torchvision_cuda": "torchvision.io.decode_jpeg(..., device='cuda') (nvJPEG), synchronized",
    "dali_mixed": "nvidia.dali fn.decoders.image(device='mixed') (nvJPEG), batch 1",
}


@dataclass
class _PilShaped:
    """A decoded PIL image with a ``shape`` (what ``prepare`` checks), without copying it out."""

    im: Any

    @property
    def shape(self) -> tuple:
        return (self.im.size[1], self.im.size[0], len(self.im.getbands()))


def _pil() -> Callable[[bytes], Callable[[], Any]]:
    from PIL import Image  # deferred: heavy; a decoder missing here is reported, not fatal

    def run(data: bytes):
        im = Image.open(io.BytesIO(data))
        im.load()  # decode only: no convert("RGB") / asarray copies (those are not decoding)
        return _PilShaped(im)

    def prep(data: bytes):
        return lambda: run(data)
    return prep


def _opencv() -> Callable[[bytes], Callable[[], Any]]:
    import cv2  # deferred: optional
    import numpy as np  # deferred: heavy
    flag = getattr(cv2, "IMREAD_COLOR_RGB", None)

    def prep(data: bytes):
        buf = np.frombuffer(data, np.uint8)
        if flag is not None:
            return lambda: cv2.imdecode(buf, flag)
        def bgr_to_rgb() -> Any:
            bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
            if bgr is None:
                raise ValueError("OpenCV could not decode the image")
            return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        return bgr_to_rgb
    return prep


def _torchvision() -> Callable[[bytes], Callable[[], Any]]:
    import torch  # deferred: heavy
    # torchvision 0.29 warns on every decode that TorchCodec supersedes it; it still decodes.
    warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of "
                            "TorchVision are deprecated", category=DeprecationWarning)
    from torchvision.io import ImageReadMode, decode_image  # deferred: optional, heavy

    def prep(data: bytes):
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return lambda: decode_image(t, mode=ImageReadMode.RGB)
    return prep


def _dali(decoder: str, device_id: int | None) -> Callable[[bytes], Callable[[], Any]]:
    """DALI's image decoder alone: ``decoder`` "cpu" (libjpeg-turbo) or "mixed" (nvJPEG)."""
    import numpy as np  # deferred: heavy
    from nvidia.dali import fn, pipeline_def, types  # deferred: optional

    where: dict[str, Any] = {"device_id": device_id}  # None: a CPU-only graph (DALI's stub says int)

    @pipeline_def(batch_size=1, num_threads=1, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1, **where)
    def graph():
        x = fn.external_source(name="x", dtype=types.UINT8)
        return fn.decoders.image(x, device=decoder, output_type=types.RGB)

    pipe = graph()
    pipe.build()

    def run(buf):
        pipe.feed_input("x", [buf])
        (out,) = pipe.run()  # returns once the work is done (exec_async=False)
        return np.asarray(out[0]) if decoder == "cpu" else _Shaped(out[0])

    def prep(data: bytes):
        buf = np.frombuffer(data, np.uint8)
        return lambda: run(buf)
    return prep


@dataclass
class _Shaped:
    """A DALI GPU tensor with a ``shape`` tuple (what ``prepare`` checks)."""

    t: Any

    @property
    def shape(self) -> tuple:
        return tuple(self.t.shape())


def _dali_cpu() -> Callable[[bytes], Callable[[], Any]]:
    return _dali("cpu", None)


def _torchvision_cuda(device: str) -> Callable[[bytes], Callable[[], Any]]:
    import torch  # deferred: heavy
    from torchvision.io import ImageReadMode, decode_jpeg  # deferred: optional, heavy
    _torchvision()  # the same warning filter

    def prep(data: bytes):
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)

        def run():
            out = decode_jpeg(t, mode=ImageReadMode.RGB, device=device)
            torch.cuda.synchronize(device)
            return out
        return run
    return prep


def _vlmprep() -> Callable[[bytes], Callable[[], Any]]:
    """The decoder inside ``decode_resize_normalize_patchify`` (built with libjpeg-turbo)."""
    if not kernels.jpeg_available():
        raise ImportError(name="vlmprep JPEG fast path (built without libjpeg-turbo)")

    def prep(data: bytes):
        h = probe(data)  # the stored size: this decoder applies no EXIF orientation
        return lambda: kernels.decode_jpeg(data, (h.height, h.width), num_threads=1)  # the floor: one thread
    return prep


def _dali_mixed(device: str) -> Callable[[bytes], Callable[[], Any]]:
    return _dali("mixed", int(device.partition(":")[2] or 0))


_MAKERS = {"pil": _pil, "opencv": _opencv, "torchvision": _torchvision, "dali_cpu": _dali_cpu,
           "vlmprep": _vlmprep}
#: GPU decoders, tried when the benchmark runs on a CUDA device (decode to device memory)
_GPU_MAKERS = {"torchvision_cuda": _torchvision_cuda, "dali_mixed": _dali_mixed}


def prepare(items: list[bytes], hws: list[tuple[int, int]], device: str = "cpu"
            ) -> tuple[dict[str, list[Callable[[], Any]]], dict[str, str]]:
    """For every decoder that works here: one zero-argument call per item that decodes it.

    ``device`` "cuda[:N]" adds the GPU decoders (nvJPEG through torchvision and DALI), each
    call synchronized. Returns ``(calls, unavailable)``: ``calls[name][i]`` decodes
    ``items[i]``; ``unavailable`` says why a decoder was left out (not installed, failed, or
    gave the wrong shape).
    """
    calls: dict[str, list[Callable[[], Any]]] = {}
    unavailable: dict[str, str] = {}
    makers = dict(_MAKERS)
    if device.startswith("cuda"):
        makers.update({k: functools.partial(m, device) for k, m in _GPU_MAKERS.items()})
    for name, make in makers.items():
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
