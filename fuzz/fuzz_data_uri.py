"""Harness (f): ``data:`` URIs through ``vlmprep.io.datauri.decode_data_uri`` (what the
Processor's input resolution calls for a str starting with "data:").

The first byte chooses the form. Even: the rest is the URI's text after "data:" (UTF-8; lone
surrogates kept, as a JSON body can carry them; else Latin-1) and ``max_bytes`` one of
16 / 1024 / 1 MiB. Odd: a well-formed URI built from the rest as payload bytes (the next byte
picks the header, the encoding (standard / URL-safe / unpadded / line-broken base64,
percent-encoding of some or all bytes) and ``max_bytes`` around the payload's size).

Guarantees: only ImageError escapes (saying "expected"); a decoded result is bytes of at most
``max_bytes`` and equal to the oracle: ``urllib.parse.unquote_to_bytes`` of the data, or for a
";base64" URI ``base64.b64decode`` of it (whitespace dropped, URL-safe letters mapped, padding
restored; also of its percent-decoded text); a built URI decodes to its payload when the payload
fits ``max_bytes``, and is refused when it does not, and is never refused when its whole text
fits ``max_bytes``.

The decoder works in chunks of ``datauri._CHUNK`` characters (1 MiB), more than any input here:
bits 4-6 of the first byte set it to 1-4 characters (at least 1/32 of the input) for half the
inputs, so that escapes, base64 quads and padding cut by a chunk's end are on the fuzzed path
(small chunks cost ~1 ms per input: the other half keeps the rate).

    .venv/bin/python fuzz/fuzz_data_uri.py fuzz/corpus/data_uri fuzz/seeds/data_uri -max_total_time=60
"""
from __future__ import annotations

import base64
import binascii
import urllib.parse

import _common  # noqa: F401  (sys.path)

_HEADERS = ("image/png;base64", "IMAGE/JPEG;BASE64", ";base64", "image/webp;name=a.webp;base64",
            "image/png;BASE64", "image/png", "", "image/gif;charset=US-ASCII")
_CAPS = (16, 1024, 1 << 20)
_CHUNKS = (0, 0, 0, 0, 1, 2, 3, 4)  # 0: the module's own; 1-4: every alignment to a base64 quad
_DEFAULT_CHUNK: list[int] = []
_UNRESERVED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"


def _b64_oracle(s: str) -> bytes | None:
    s = "".join(s.split()).translate(str.maketrans("-_", "+/")).rstrip("=")
    if len(s) % 4 == 1:
        return None
    try:
        return base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _oracle(uri: str) -> list[bytes]:
    """The bytes a decoder may return for ``uri`` (empty: it must refuse it)."""
    head, sep, payload = uri.partition(",")
    if not sep:
        return []
    if any(p.strip().lower() == "base64" for p in head[5:].split(";")[1:]):
        got = [_b64_oracle(payload)]
        if "%" in payload:  # base64 that was percent-encoded as well
            try:
                got.append(_b64_oracle(urllib.parse.unquote_to_bytes(payload).decode("ascii")))
            except UnicodeError:
                pass
        return [g for g in got if g is not None]
    try:
        return [urllib.parse.unquote_to_bytes(payload)]
    except UnicodeEncodeError:  # a lone surrogate: no bytes to give
        return []


def _built(opt: int, payload: bytes) -> tuple[str, int]:
    """A well-formed URI of ``payload`` and the max_bytes to decode it with."""
    header = _HEADERS[opt & 7]
    enc = (opt >> 3) & 7
    if "base64" in header.lower():
        s = base64.b64encode(payload).decode()
        if enc in (1, 5):
            s = base64.urlsafe_b64encode(payload).decode()
        if enc in (2, 5):
            s = s.rstrip("=")
        if enc in (3, 6):
            s = "\r\n".join(s[i:i + 76] for i in range(0, len(s), 76))
        if enc == 4:
            s = "\n".join(s[i:i + 4] for i in range(0, len(s), 4))
    else:
        keep = b"" if enc & 1 else _UNRESERVED
        s = "".join(chr(c) if c in keep else f"%{c:02{'x' if enc & 2 else 'X'}}" for c in payload)
    cap = (len(payload) - 1, len(payload), len(s), len(s) + 7, 1 << 20, max(len(payload) // 2, 1),
           len(payload) + 1, 1)[(opt >> 6) & 3 | (4 if enc == 7 else 0)]
    prefix = ("data:", "DATA:", "Data:")[opt % 3]
    return prefix + header + "," + s, max(cap, 1)


def test_one_input(data: bytes) -> None:
    from vlmprep.errors import ImageError
    from vlmprep.io import datauri
    from vlmprep.io.datauri import decode_data_uri
    if not data:
        return
    if not _DEFAULT_CHUNK:
        _DEFAULT_CHUNK.append(datauri._CHUNK)
    small = _CHUNKS[(data[0] >> 4) & 7]  # at most ~32 chunks per input: the rate stays up
    datauri._CHUNK = max(small, len(data) >> 5) if small else _DEFAULT_CHUNK[0]
    built = data[0] & 1 and len(data) >= 2
    if built:
        payload = data[2:]
        uri, cap = _built(data[1], payload)
    else:
        try:
            text = data[1:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            text = data[1:].decode("latin-1")
        uri, cap = "data:" + text, _CAPS[(data[0] >> 1) % 3]
    try:
        out = decode_data_uri(uri, cap)
    except ImageError as e:
        assert "expected" in str(e), f"ImageError without 'expected'\n{e}"
        if built:
            body = uri.partition(",")[2]
            assert not payload or len(body) > cap or len(payload) > cap, (
                f"refused a well-formed URI whose text fits max_bytes\n{len(body)} chars, max_bytes={cap}: {e}")
        return
    assert isinstance(out, (bytes, bytearray)), f"not bytes\n{type(out)}"
    assert len(out) <= cap, f"decoded more bytes than max_bytes\n{len(out)} > {cap}: {uri[:80]!r}"
    if built:
        assert bytes(out) == payload, (
            f"a built URI decoded to other bytes than its payload\n{bytes(out)[:40]!r}, expected {payload[:40]!r}")
        return
    want = _oracle(uri)
    assert want, f"accepted a URI the oracle refuses\n{uri[:80]!r} as {bytes(out)[:40]!r}"
    assert bytes(out) in want, (
        f"decoded other bytes than the oracle\n{bytes(out)[:40]!r}, the oracle gives {[w[:40] for w in want]}")


if __name__ == "__main__":
    _common.main(test_one_input, instrument=("vlmprep.io.inputs",), funcs=(_built,))
