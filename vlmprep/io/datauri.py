"""``data:`` URIs and base64 strings -> the encoded bytes they carry, within max_source_bytes.

Time and memory are bounded by ``max_bytes``, never by the string's length: the shortest
possible decode is checked first, then the payload is decoded ``_CHUNK`` characters at a time.
"""
from __future__ import annotations

import base64
import binascii
from typing import Any

from ..errors import ImageError
from ..ops import DEFAULT_MAX_SOURCE_BYTES
from .files import too_big

__all__ = ["decode_data_uri", "decode_base64"]

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
        raise too_big((n + 2) // 3, max_bytes, "or more in a percent-encoded data URI")
    if s.isascii() and s.find("%", start) < 0:  # nothing to unescape: one byte per character
        if n > max_bytes:
            raise too_big(n, max_bytes, "in a percent-encoded data URI")
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
            raise too_big(got, max_bytes, "or more in a percent-encoded data URI")
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
            raise too_big(n * 3 // 4, max_bytes, f"once decoded, in {what}")
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
