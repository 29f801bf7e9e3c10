"""Classify and validate input items; the boundary where bad inputs become ImageErrors.

An input item is one image: encoded bytes, a path, a PIL image, an HWC uint8 RGB
numpy array or a CHW uint8 RGB torch tensor; as serving code has them, also a
``data:image/...;base64,...`` URI or a raw base64 string of an encoded file (decoded
here, within ``max_source_bytes``), and a URL when the caller passes a ``fetch``
callable (never otherwise: vlmprep makes no network call of its own). ``resolve`` looks
only at headers and shapes; pixels are read by ``vlmprep.io.decode``.

Paths are untrusted too: ``vlmprep.io.files`` (``open_image_file``, ``read_image_file``, the
only ways vlmprep opens an image path) stats them first and opens only regular files;
``vlmprep.io.datauri`` decodes data URIs and base64 within ``max_source_bytes``. Both are
re-exported here.
"""
from __future__ import annotations

import base64
import binascii
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .probe import ProbeResult

from ..errors import ImageError, describe_source
from ..ops import DEFAULT_MAX_SOURCE_BYTES
from .datauri import decode_base64, decode_data_uri
from .files import open_image_file, read_at_most, read_image_file, stat_image_file, too_big
from .probe import probe

__all__ = ["Source", "as_image_list", "resolve", "encoded_buffer", "open_image_file",
           "read_image_file", "stat_image_file", "read_at_most", "is_ndarray", "is_torch_tensor",
           "decode_data_uri", "decode_base64", "fetch_url", "DEFAULT_FETCH_TIMEOUT_S"]

#: Seconds a user-supplied ``fetch(url)`` may take, reading included (``fetch_timeout_s``).
DEFAULT_FETCH_TIMEOUT_S = 30.0

_ENCODED = (bytes, bytearray, memoryview)
# A URL scheme ("http://", "s3://", "file://") or a data URI: not a local path.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DATA = re.compile(r"^data:", re.IGNORECASE)
# The start of a base64 string (standard or URL-safe alphabet) ...
_B64_HEAD = re.compile(r"^[A-Za-z0-9+/_-]{16}")
# ... and the magic numbers of the formats probe reads: a string is taken as base64 only when
# its first 12 decoded bytes start one, so a missing path is never misread as base64.
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"II*\x00",
          b"MM\x00*", b"II\x00*", b"MM*\x00", b"II+\x00", b"MM\x00+", b"RIFF")


@dataclass(frozen=True)
class Source:
    """One validated input item.

    Fields:
        kind: ``"encoded"`` (bytes or path), ``"pil"``, ``"array"`` (HWC uint8 numpy) or
            ``"tensor"`` (CHW uint8 torch); ``"page"``: a PDF page not yet rendered
            (``io.document``; ``Processor.render_documents`` makes it an ``"array"``) or a TIFF
            frame not yet decoded (made a ``"pil"``).
        item: the item as given (a path is kept as a path; bytes are read at decode), except
            that a memoryview becomes a flat byte view (or a copy when not contiguous) and
            an ndarray subclass (``np.memmap``, ...) a plain ndarray view of the same memory.
        hw: ``(H, W)`` the decoded image will have (after EXIF orientation for encoded inputs).
        header: the probe result for encoded inputs, else None.
        desc: short description for error messages.
    """

    kind: str
    item: Any
    hw: tuple[int, int]
    header: "ProbeResult | None"
    desc: str


def _derives(x: Any, module: str, name: str) -> bool:
    # By class name along the MRO, so that subclasses (np.memmap, nn.Parameter) are accepted
    # and a caller without numpy or torch never imports them here.
    return any(c.__name__ == name and (c.__module__ or "") == module for c in type(x).__mro__)


def is_torch_tensor(x: Any) -> bool:
    return _derives(x, "torch", "Tensor")


def is_ndarray(x: Any) -> bool:
    return _derives(x, "numpy", "ndarray")


def as_image_list(images: Any) -> list:
    """The images of one call as a list: a list or tuple as given; one bare image (bytes, a
    path, an array or tensor, a PIL image) as a batch of one, like transformers' processors."""
    if isinstance(images, (list, tuple)):
        return list(images)
    if isinstance(images, (bytes, bytearray, memoryview, str, os.PathLike)) or hasattr(images, "shape") \
            or (type(images).__module__ or "").startswith("PIL"):
        return [images]
    raise TypeError(f"images: expected a list of images (bytes, paths, PIL images, HWC uint8 arrays, "
                    f"CHW uint8 tensors), got {type(images).__name__}; wrap a generator in list()")


def resolve(item: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
            fetch: Callable[[str], Any] | None = None,
            fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S) -> Source:
    """Validate one input item from its header or shape -> Source; raises ImageError only.

    ``max_bytes``: the largest encoded input (bytes, a file's size on disk, the decoded size of
    a data URI or base64 string, a fetched body) accepted (``decode.max_source_bytes``).
    ``fetch``: the caller's ``fetch(url) -> bytes | binary file object`` for URL items (see
    ``fetch_url``); without it a URL is an ImageError. Any other exception met while
    inspecting a hostile item (a released buffer, a property that raises) becomes an
    ImageError naming it.
    """
    desc = describe_source(item)
    try:
        return _resolve(item, desc, max_bytes, fetch, fetch_timeout_s)
    except ImageError as e:
        # Named as given (probe names what it read: a flat copy of a view, a file object).
        raise ImageError(e.reason, index=e.index, source=desc) from (e.__cause__ or e)
    except (RecursionError, MemoryError) as e:
        raise ImageError(f"expected an image item, got one whose inspection failed "
                         f"({type(e).__name__}); pass bytes, a path or an array", source=desc) from e
    except Exception as e:  # noqa: BLE001 (a per-item cause: never fail the batch)
        raise ImageError(f"expected a readable image item, got {type(e).__name__} while "
                         f"inspecting it ({e}); pass bytes, a path, a PIL image or an array",
                         source=desc) from e


def _encoded(buf: Any, desc: str, what: str = "") -> Source:
    try:
        hdr = probe(buf)
    except ImageError as e:
        if not what:
            raise
        raise ImageError(f"{e.reason} (in the bytes {what})") from (e.__cause__ or e)
    return Source("encoded", buf, hdr.size_hw, hdr, desc)


def _resolve(item: Any, desc: str, max_bytes: int, fetch: Callable[[str], Any] | None,
             fetch_timeout_s: float) -> Source:
    if isinstance(item, _ENCODED):
        return _encoded(encoded_buffer(item, max_bytes), desc)
    if isinstance(item, str):  # serving forms first: a data URI, a URL, base64
        if _DATA.match(item):
            return _encoded(decode_data_uri(item, max_bytes), desc, "decoded from the data URI")
        if _URL.match(item):
            if fetch is None:
                raise ImageError(_url_reason(item))
            return _encoded(fetch_url(item, fetch, max_bytes, fetch_timeout_s), desc,
                            "fetched from the URL")
        if _is_base64_image(item) and not _exists(item):
            return _encoded(decode_base64(item, max_bytes), desc, "decoded from the base64 string")
    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        with open_image_file(path, max_bytes) as f:
            hdr = probe(f)
        return Source("encoded", item, hdr.size_hw, hdr, desc)
    mod = type(item).__module__ or ""
    if mod.startswith("PIL") and hasattr(item, "getbands"):
        _check_pil(item)
        w, h = item.size
        return Source("pil", item, (int(h), int(w)), None, desc)
    if is_ndarray(item):
        import numpy as np
        a = item if type(item) is np.ndarray else np.asarray(item).view(np.ndarray)
        _check_array(a, layout="HWC", channel_axis=2)
        return Source("array", a, (int(a.shape[0]), int(a.shape[1])), None, desc)
    if is_torch_tensor(item):
        _check_tensor(item)
        _check_array(item, layout="CHW", channel_axis=0)
        return Source("tensor", item, (int(item.shape[1]), int(item.shape[2])), None, desc)
    raise ImageError(f"expected bytes, a path, a PIL.Image, an HWC uint8 numpy array or a CHW "
                     f"uint8 torch.Tensor, got {mod}.{type(item).__name__}; "
                     f"pass one image per list item")


# -- encoded bytes ------------------------------------------------------------------------------
def encoded_buffer(item: Any, max_bytes: int) -> "bytes | bytearray | memoryview":
    """bytes-like -> a flat byte buffer of at most ``max_bytes`` bytes (bytes and bytearray,
    subclasses included, as given); ImageError for a larger or released one. The one check of
    encoded bytes: resolve, decode and the cache use it."""
    if not isinstance(item, memoryview):
        if len(item) > max_bytes:
            raise too_big(len(item), max_bytes, f"in a {type(item).__name__} object")
        return item
    try:
        n = item.nbytes
    except ValueError as e:  # released
        raise ImageError(f"expected a readable byte buffer, got a released memoryview ({e}); "
                         f"keep the buffer alive until the call returns, or pass bytes") from e
    if n > max_bytes:
        raise too_big(n, max_bytes, "in a memoryview")
    if item.c_contiguous:
        # Any format and shape: the same memory seen as n bytes (len() would count items).
        return item if item.format == "B" and item.ndim == 1 else item.cast("B")
    # A strided view (e.g. mv[::2]): probe and decoders need one run of bytes: copy it (<= n).
    return item.tobytes()


# -- strings as serving code has them: data URIs (io/datauri.py), base64, URLs -------------------
def _is_base64_image(s: str) -> bool:
    """Whether ``s`` starts like base64 of an encoded image (decodes 16 characters only)."""
    if not _B64_HEAD.match(s):
        return False
    head = s[:16]
    try:
        data = base64.b64decode(head, altchars=b"-_" if ("-" in head or "_" in head) else None,
                                validate=True)
    except (binascii.Error, ValueError):
        return False
    return data.startswith(_MAGIC)


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


def fetch_url(url: str, fetch: Callable[[str], Any], max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
              timeout_s: float = DEFAULT_FETCH_TIMEOUT_S) -> bytes:
    """``fetch(url)`` -> the body, within ``max_bytes`` and ``timeout_s`` seconds (call and read).

    ``fetch`` is the caller's: it returns bytes-like, or a binary file object (an HTTP response
    such as ``urllib.request.urlopen(url, timeout=...)``), of which at most ``max_bytes + 1``
    bytes are read, in chunks, and which is closed after. The call runs in a daemon thread:
    past the time limit this raises ImageError and the thread stops reading at its next chunk
    (a ``fetch`` that blocks inside itself runs on until it returns: give it its own timeout).
    Any exception of ``fetch`` becomes an ImageError naming it.
    """
    done: dict[str, Any] = {}
    stop = threading.Event()

    def work() -> None:
        try:
            done["data"] = _read_body(fetch(url), max_bytes, stop)
        except BaseException as e:  # noqa: BLE001 (reported to the caller's thread)
            done["error"] = e

    t = threading.Thread(target=work, name="vlmprep-fetch", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        stop.set()
        raise ImageError(f"expected fetch(url) to return the image within {timeout_s:g} s "
                         f"(fetch_timeout_s), got no complete answer; check the server, or raise "
                         f"fetch_timeout_s")
    err = done.get("error")
    if isinstance(err, ImageError):
        raise err
    if err is not None:
        raise ImageError(f"expected fetch(url) to return the image, got {type(err).__name__}: "
                         f"{err}; check the URL and the server") from err
    return done["data"]


def _read_body(out: Any, max_bytes: int, stop: threading.Event) -> bytes:
    if isinstance(out, _ENCODED):
        buf = encoded_buffer(out, max_bytes)
        return buf if isinstance(buf, bytes) else bytes(buf)
    if not callable(getattr(out, "read", None)):
        raise ImageError(f"expected fetch(url) to return bytes or a binary file object, got "
                         f"{type(out).__name__}; return e.g. requests.get(url).content")
    try:
        parts: list[bytes] = []
        got = 0
        while got <= max_bytes and not stop.is_set():
            chunk = out.read(min(1 << 16, max_bytes + 1 - got))
            if not chunk:
                break
            if not isinstance(chunk, _ENCODED):
                raise ImageError(f"expected fetch(url)'s file object to read bytes, got "
                                 f"{type(chunk).__name__}; open the response in binary mode")
            parts.append(bytes(chunk))
            got += len(chunk)
    finally:
        close = getattr(out, "close", None)
        if callable(close):
            close()
    if got > max_bytes:
        raise too_big(got, max_bytes, "or more fetched from the URL")
    return b"".join(parts)


def _url_reason(url: str) -> str:
    scheme = url.split("://", 1)[0]
    return (f"expected bytes, a local file path, a data URI or base64, got a URL ({scheme}://); "
            f"vlmprep never downloads by itself: pass Processor(..., fetch=fn) with fn(url) -> "
            f"bytes or a binary file object (e.g. fetch=lambda u: urllib.request.urlopen(u, "
            f"timeout=10)), bounded by max_source_bytes and fetch_timeout_s, or fetch it first "
            f"and pass the bytes")



# -- decoded images -----------------------------------------------------------------------------
def _check_pil(img: Any) -> None:
    d = getattr(img, "__dict__", {})
    im = d.get("_im", d.get("im"))  # Pillow >= 11 keeps it in _im behind an `im` property
    if type(im).__name__ == "DeferredError":  # what Image.close() leaves behind
        raise ImageError("expected an open PIL image, got one that was closed; keep it open "
                         "until the call returns, or pass im.copy() made before closing it")
    w, h = img.size
    if w < 1 or h < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got a PIL image of size "
                         f"{w}x{h}")


def _check_tensor(t: Any) -> None:
    import torch
    if t.layout != torch.strided or getattr(t, "is_nested", False):
        layout = "nested" if getattr(t, "is_nested", False) else str(t.layout).replace("torch.", "")
        raise ImageError(f"expected a dense (strided) CHW uint8 tensor, got layout {layout}; "
                         f"call .to_dense() first")
    if t.is_meta or t.device.type == "meta":
        raise ImageError("expected a tensor holding pixels, got a meta tensor (shape only, no "
                         "data); materialize it (e.g. torch.empty_like(t, device='cpu')) first")


def _check_array(a: Any, layout: str, channel_axis: int) -> None:
    shape = tuple(a.shape)
    dtype = str(a.dtype).replace("torch.", "")
    if dtype != "uint8":
        raise ImageError(f"expected a {layout} uint8 RGB array, got dtype {dtype}; convert with "
                         f"(x * 255).round().clip(0, 255) to uint8 first, or pass the encoded file")
    if len(shape) == 3 and shape[channel_axis] != 3 and shape[2 - channel_axis] == 3:
        # The other layout's channel axis holds 3: most likely transposed, not gray or RGBA.
        other = "CHW" if layout == "HWC" else "HWC"
        fix = ("a.transpose(1, 2, 0)" if layout == "HWC" else "t.permute(2, 0, 1)")
        raise ImageError(f"expected a {layout} RGB array with 3 channels on axis {channel_axis}, "
                         f"got shape {shape}: got {other}, expected {layout}: transpose (e.g. "
                         f"{fix})")
    if len(shape) != 3 or shape[channel_axis] != 3:
        raise ImageError(f"expected a {layout} RGB array with 3 channels on axis {channel_axis}, "
                         f"got shape {shape}; stack gray to 3 channels or drop alpha first (or pass "
                         f"a PIL image, which is converted as transformers does)")
    h, w = (shape[0], shape[1]) if layout == "HWC" else (shape[1], shape[2])
    if h < 1 or w < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got shape {shape}")
