"""Classify and validate input items; the boundary where bad inputs become ImageErrors.

An input item is one image: encoded bytes, a path, a PIL image, an HWC uint8 RGB
numpy array or a CHW uint8 RGB torch tensor; as serving code has them, also a
``data:image/...;base64,...`` URI or a raw base64 string of an encoded file (decoded
here, within ``max_source_bytes``), and a URL when the caller passes a ``fetch``
callable (never otherwise: vlmprep makes no network call of its own). ``resolve`` looks
only at headers and shapes; pixels are read by ``vlmprep.io.decode``.

Paths are untrusted too: a path is stat'ed before anything opens it, only a regular file
is ever opened (a FIFO, ``/dev/zero`` or a socket would block or never end), it is opened
non-blocking (a FIFO swapped in after the stat cannot block ``open``), and its size is
checked against ``max_source_bytes`` before a byte is read. ``open_image_file`` and
``read_image_file`` are the only ways vlmprep opens an image path.
"""
from __future__ import annotations

import base64
import binascii
import errno
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .probe import ProbeResult

from ..errors import ImageError, describe_source
from ..ops import DEFAULT_MAX_SOURCE_BYTES

__all__ = ["Source", "as_image_list", "resolve", "encoded_buffer", "open_image_file",
           "read_image_file", "stat_image_file", "is_ndarray", "is_torch_tensor",
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
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


@dataclass(frozen=True)
class Source:
    """One validated input item.

    Fields:
        kind: ``"encoded"`` (bytes or path), ``"pil"``, ``"array"`` (HWC uint8 numpy) or
            ``"tensor"`` (CHW uint8 torch).
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
    from .probe import probe
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
        from .probe import probe
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
def _too_big(n: int, max_bytes: int, where: str) -> ImageError:
    return ImageError(f"expected an encoded image of at most {max_bytes:,} bytes "
                      f"(decode.max_source_bytes), got {n:,} bytes {where}; pass a smaller "
                      f"image, or raise max_source_bytes= if the source is trusted")


def encoded_buffer(item: Any, max_bytes: int) -> "bytes | bytearray | memoryview":
    """bytes-like -> a flat byte buffer of at most ``max_bytes`` bytes (bytes and bytearray,
    subclasses included, as given); ImageError for a larger or released one. The one check of
    encoded bytes: resolve, decode and the cache use it."""
    if not isinstance(item, memoryview):
        if len(item) > max_bytes:
            raise _too_big(len(item), max_bytes, f"in a {type(item).__name__} object")
        return item
    try:
        n = item.nbytes
    except ValueError as e:  # released
        raise ImageError(f"expected a readable byte buffer, got a released memoryview ({e}); "
                         f"keep the buffer alive until the call returns, or pass bytes") from e
    if n > max_bytes:
        raise _too_big(n, max_bytes, "in a memoryview")
    if item.c_contiguous:
        # Any format and shape: the same memory seen as n bytes (len() would count items).
        return item if item.format == "B" and item.ndim == 1 else item.cast("B")
    # A strided view (e.g. mv[::2]): probe and decoders need one run of bytes: copy it (<= n).
    return item.tobytes()


# -- strings as serving code has them: data URIs, base64, URLs -----------------------------------
#: Characters of a data URI or base64 string handled per step: the extra memory of a decode is
#: a few times this (plus the output, at most max_source_bytes), whatever the string's length.
_CHUNK = 1 << 20
#: Longest data URI header ("data:" + media type + parameters, before the ','): real ones are
#: tens of characters; a longer one is refused before it is split.
_MAX_HEADER = 1024
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_URLSAFE = bytes.maketrans(b"-_", b"+/")
_SPACE = b" \t\r\n"


def decode_data_uri(uri: str, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> bytes:
    """``data:[image/<type>][;base64],<payload>`` -> the encoded image bytes (RFC 2397).

    The media type must be ``image/...`` (or absent); the payload base64 (standard or URL-safe
    alphabet) or percent-encoded (bytes as ``urllib.parse.unquote_to_bytes`` gives them). Time
    and memory are bounded by ``max_bytes``, never by the string: a payload whose shortest
    decode is over it (base64: 3/4 of its length; percent-encoding: a third) is refused before
    anything is decoded, and the payload is decoded ``_CHUNK`` characters at a time, stopping
    as soon as the output passes ``max_bytes``. Raises ImageError.
    """
    comma = uri.find(",", 0, _MAX_HEADER + 1)
    if comma < 0:
        if uri.find(",") < 0:
            raise ImageError("expected a data URI 'data:image/<type>;base64,<data>', got one without "
                             "the ',' before the data; send the URI as the client built it")
        raise ImageError(f"expected a data URI header (media type and parameters before the ',') of at "
                         f"most {_MAX_HEADER:,} characters, got a longer one; send "
                         f"'data:image/<type>;base64,<data>'")
    params = [p.strip() for p in uri[5:comma].split(";")]
    media = params[0].lower()
    if media and not media.startswith("image/"):
        raise ImageError(f"expected a data URI of an image (media type image/...), got media type "
                         f"{params[0][:40]!r}; send an image (e.g. data:image/jpeg;base64,...)")
    if any(p.lower() == "base64" for p in params[1:]):
        return _b64decode(uri, comma + 1, max_bytes, "the data URI's base64 data")
    return _unpercent(uri, comma + 1, max_bytes)


def _unpercent(s: str, start: int, max_bytes: int) -> bytes:
    """``urllib.parse.unquote_to_bytes(s[start:])`` (UTF-8 for non-ASCII characters, a '%' not
    followed by two hex digits kept as is) within ``max_bytes``, ``_CHUNK`` characters at a time
    (unquote_to_bytes splits the whole string into one object per escape: 17.7 GB for 209 MB)."""
    n = len(s) - start
    if (n + 2) // 3 > max_bytes:  # every 3 characters give at least 1 byte
        raise _too_big((n + 2) // 3, max_bytes, "or more in a percent-encoded data URI")
    if s.isascii() and s.find("%", start) < 0:  # nothing to unescape: one byte per character
        if n > max_bytes:
            raise _too_big(n, max_bytes, "in a percent-encoded data URI")
        return s[start:].encode("ascii")
    import numpy as np
    parts: list[bytes] = []
    got = 0
    carry = b""
    for a in range(start, len(s), _CHUNK):
        try:
            b = carry + s[a:a + _CHUNK].encode("utf-8")
        except UnicodeEncodeError as e:
            raise _not_utf8(e) from e
        cut = len(b)
        if a + _CHUNK < len(s):  # an escape cut by the chunk's end waits for the next chunk
            cut = len(b) - 2 if b[-2:-1] == b"%" else len(b) - 1 if b[-1:] == b"%" else cut
        carry = b[cut:]
        part = _unescape(np.frombuffer(b, np.uint8, cut))
        got += len(part)
        if got > max_bytes:
            raise _too_big(got, max_bytes, "or more in a percent-encoded data URI")
        parts.append(part)
    return b"".join(parts)


_HEXVAL = bytes(int(chr(c), 16) if chr(c) in "0123456789abcdefABCDEF" else 255 for c in range(256))


def _unescape(a: "Any") -> bytes:
    """``(n,)`` uint8 text -> its bytes with each '%XX' (two hex digits) made one byte."""
    import numpy as np
    hexval = np.frombuffer(_HEXVAL, np.uint8)
    p = np.flatnonzero(a[:max(len(a) - 2, 0)] == 0x25)
    hi, lo = hexval[a[p + 1]], hexval[a[p + 2]]
    ok = (hi | lo) < 16
    p = p[ok]
    out = a.copy()
    out[p] = (hi[ok] << 4) | lo[ok]
    keep = np.ones(len(a), bool)
    keep[p + 1] = False
    keep[p + 2] = False
    return out[keep].tobytes()


def _not_utf8(e: UnicodeEncodeError) -> ImageError:
    return ImageError(f"expected a percent-encoded data URI of text (ASCII or UTF-8), got a character "
                      f"UTF-8 cannot encode ({e.reason}); percent-encode the image's bytes "
                      f"(urllib.parse.quote_from_bytes) or send base64")


def decode_base64(s: str, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
                  what: str = "a base64 string") -> bytes:
    """A base64 string (standard or URL-safe alphabet; padding optional; spaces and line breaks
    allowed) -> its bytes, at most ``max_bytes``: the decoded size (3/4 of the length less
    spaces, line breaks and padding) is checked before decoding, which then runs ``_CHUNK``
    characters at a time. Raises ImageError for a larger or malformed string."""
    return _b64decode(s, 0, max_bytes, what)


def _b64decode(s: str, start: int, max_bytes: int, what: str) -> bytes:
    """``base64.b64decode`` of ``s[start:]`` with its spaces and line breaks dropped, the URL-safe
    letters mapped and the padding made whole, ``validate=True``; bounded as ``decode_base64``."""
    n = _unpadded(s) - start
    if n * 3 // 4 > max_bytes:  # spaces, line breaks, '=' decode to nothing: counted (in C) only here
        n = len(s) - start - sum(s.count(c, start) for c in " \t\r\n=")
        if n * 3 // 4 > max_bytes:
            raise _too_big(n * 3 // 4, max_bytes, f"once decoded, in {what}")
    urlsafe = s.find("-", start) >= 0 or s.find("_", start) >= 0
    parts: list[bytes] = []
    data = pad = 0  # base64 letters and '=' seen
    carry = b""
    try:
        for a in range(start, len(s), _CHUNK):
            b = s[a:a + _CHUNK].encode("ascii").translate(_URLSAFE if urlsafe else None, _SPACE)
            rest = b.translate(None, _B64_ALPHABET)
            if rest:  # only '=' may remain, all after the last letter
                eq = b.find(b"=")
                if rest.strip(b"=") or b[eq:].strip(b"="):
                    raise binascii.Error("Non-base64 digit found")
                b = b[:eq]
            if b and pad:  # letters after the padding of an earlier chunk
                raise binascii.Error("Non-base64 digit found")
            pad += len(rest)
            data += len(b)
            b = carry + b
            cut = max(len(b) // 4 * 4 - 4, 0)  # the last whole quad waits: the padding rules see it
            carry = b[cut:]
            parts.append(binascii.a2b_base64(b[:cut]))
        if (data + pad - min(pad, 2)) % 4 == 1:
            raise binascii.Error(f"a length of 4k + 1 characters ({data:,} without the padding)")
        tail = carry + b"=" * pad  # padding optional; this Python's own padding rules judge it
        parts.append(base64.b64decode(tail + b"=" * (-len(tail) % 4), validate=True))
    except (binascii.Error, ValueError) as e:
        raise ImageError(f"expected {what} to be valid base64, got malformed base64 ({e}); send "
                         f"the file's bytes base64-encoded whole (base64.b64encode(data))") from e
    return b"".join(parts)


def _unpadded(s: str) -> int:
    """Characters of ``s`` before its '=' padding (no copy of a long string)."""
    return len(s) - (2 if s.endswith("==") else 1 if s.endswith("=") else 0)


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
        raise _too_big(got, max_bytes, "or more fetched from the URL")
    return b"".join(parts)


def _url_reason(url: str) -> str:
    scheme = url.split("://", 1)[0]
    return (f"expected bytes, a local file path, a data URI or base64, got a URL ({scheme}://); "
            f"vlmprep never downloads by itself: pass Processor(..., fetch=fn) with fn(url) -> "
            f"bytes or a binary file object (e.g. fetch=lambda u: urllib.request.urlopen(u, "
            f"timeout=10)), bounded by max_source_bytes and fetch_timeout_s, or fetch it first "
            f"and pass the bytes")


# -- paths --------------------------------------------------------------------------------------


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _missing(path: Any, e: OSError | ValueError) -> ImageError:
    """What stat/open found instead of a file, as an ImageError."""
    cwd = ""
    try:
        if not os.path.isabs(path):
            cwd = f" (relative paths resolve from {os.getcwd()})"
    except (ValueError, OSError, TypeError):
        pass
    if isinstance(e, ValueError):
        found, fix = "a path containing a NUL character", "remove the \\0 from the path"
    elif e.errno == errno.ENOENT:
        found, fix = "nothing", f"check the path{cwd}"
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                found = f"a broken symbolic link (to {os.readlink(path)!r})"
                fix = "point the link at an existing file"
        except (OSError, ValueError):
            pass
    elif e.errno in (errno.EACCES, errno.EPERM):
        found, fix = "a path it may not read (permission denied)", \
            "give the serving user read access to the file and its folders"
    elif e.errno == errno.ENAMETOOLONG:
        found, fix = "a name too long for the file system (over 255 bytes per component)", \
            "shorten the path"
    elif e.errno == errno.ENOTDIR:
        found, fix = "a path through something that is not a directory", f"check the path{cwd}"
    elif e.errno == errno.ELOOP:
        found, fix = "a loop of symbolic links", "fix the links"
    else:
        found, fix = f"an error ({e.strerror or e})", "check the path and the file system"
    return ImageError(f"expected an image file at this path, found {found}; {fix}")


def stat_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> os.stat_result:
    """``os.stat`` of an image path, without opening it -> its stat result.

    Raises ImageError naming what is there instead of a regular file (nothing, a directory, a
    character device, a FIFO, a socket, a broken symlink, permission denied, ...) or when its
    size is above ``max_bytes``.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise _missing(path, e) from e
    if not stat.S_ISREG(st.st_mode):
        fix = ("pass the path of a file inside it" if stat.S_ISDIR(st.st_mode)
               else "pass a regular file (special files are never read: they may not end)")
        raise ImageError(f"expected an image file at this path, found {_file_kind(st.st_mode)}; "
                         f"{fix}")
    if st.st_size > max_bytes:
        raise _too_big(st.st_size, max_bytes, "in a file")
    return st


def open_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES):
    """Open a regular file of at most ``max_bytes`` bytes -> unbuffered binary file object.

    Never opens a non-regular file (checked with ``stat`` first), never blocks (opened with
    ``O_NONBLOCK``; a FIFO swapped in after the stat is caught by ``fstat``). Raises ImageError.
    """
    stat_image_file(path, max_bytes)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError) as e:
        raise _missing(path, e) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"expected an image file at this path, found "
                             f"{_file_kind(st.st_mode)}; pass a regular file")
        if st.st_size > max_bytes:
            raise _too_big(st.st_size, max_bytes, "in a file")
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file: back to plain reads
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_at_most(f: Any, max_bytes: int) -> bytes:
    """The bytes of binary file ``f`` from its position to its end, or its first ``max_bytes + 1``
    when it holds more (the caller refuses those): reads again after a short read (network FS)."""
    parts: list[bytes] = []
    n = 0
    while n <= max_bytes:
        chunk = f.read(min(max_bytes + 1 - n, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)


def read_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> bytes:
    """The bytes of a regular image file, at most ``max_bytes`` (a file that grew past it
    after the stat is an ImageError too, found after reading ``max_bytes + 1``)."""
    with open_image_file(path, max_bytes) as f:
        try:
            out = read_at_most(f, max_bytes)
        except OSError as e:
            raise ImageError(f"expected a readable file, got {type(e).__name__}: {e.strerror}; "
                             f"check the file and its file system") from e
    if len(out) > max_bytes:
        raise _too_big(len(out), max_bytes, "or more in a file that grew while read")
    return out


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
