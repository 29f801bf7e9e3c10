"""Inputs as serving code has them: data URIs, raw base64 strings, URLs (only with a fetch
callable, bounded by vlmprep). Real encoded images; no network."""
from __future__ import annotations

import base64
import io
import threading
import urllib.parse

import pytest
import torch
from _support.imgdata import crop, encode

import vlmprep
import vlmprep.io.inputs as inputs


@pytest.fixture(scope="module")
def files():
    return {"jpeg": encode(crop("astronaut", 90, 130), "jpeg"),
            "png": encode(crop("coffee", 70, 50), "png"),
            "webp": encode(crop("chelsea", 60, 80), "webp")}


def _proc(**kw):
    return vlmprep.Processor("qwen2-vl", backend="reference", **kw)


def _same(a, b):
    assert torch.equal(a.pixel_values, b.pixel_values) and torch.equal(a.grid_thw, b.grid_thw)
    assert a.num_tokens == b.num_tokens


def test_data_uri_and_base64_equal_the_bytes(files):
    proc = _proc()
    want = proc(list(files.values()))
    b64 = {k: base64.b64encode(v).decode() for k, v in files.items()}
    uris = [f"data:image/{k};base64,{v}" for k, v in b64.items()]
    _same(proc(uris), want)
    _same(proc(list(b64.values())), want)
    # The spellings clients send: URL-safe alphabet, no padding, MIME line breaks, upper case.
    urlsafe = [base64.urlsafe_b64encode(v).decode().rstrip("=") for v in files.values()]
    _same(proc(urlsafe), want)
    mime = [base64.encodebytes(v).decode() for v in files.values()]
    _same(proc(mime), want)
    _same(proc([f"DATA:IMAGE/JPEG;BASE64,{b64['jpeg']}"]), proc([files["jpeg"]]))
    # Percent-encoded (no ;base64) and no media type at all.
    pct = "data:image/png," + urllib.parse.quote_from_bytes(files["png"])
    _same(proc([pct, f"data:;base64,{b64['png']}"]), proc([files["png"]] * 2))
    # plan() reads the same header.
    assert proc.plan(uris).num_tokens == want.num_tokens


def test_size_bound_checked_before_decoding(files, monkeypatch):
    s = base64.b64encode(files["png"]).decode()
    decoded = []
    real = base64.b64decode
    monkeypatch.setattr(base64, "b64decode", lambda *a, **k: decoded.append(1) or real(*a, **k))
    small = len(files["png"]) - 1
    for item in (s, f"data:image/png;base64,{s}"):
        decoded.clear()
        with pytest.raises(vlmprep.ImageError, match="max_source_bytes") as ei:
            _proc(max_source_bytes=small)([item])
        assert "once decoded" in ei.value.reason
        assert len(decoded) <= 1  # the 16-character sniff of a raw string, never the payload
    # At the limit exactly: accepted.
    assert _proc(max_source_bytes=len(files["png"]))([s]).num_images == 1


@pytest.mark.parametrize("item, words", [
    ("data:text/plain;base64,aGVsbG8=", "media type"),
    ("data:application/pdf;base64,JVBERi0=", "media type"),
    ("data:image/png;base64,iVBORw0KGgo*AAAA", "malformed base64"),
    ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=X", "malformed base64"),
    ("data:image/png;base64", "','"),
    ("data:image/png;base64,iVBORw0KGgo=", "data URI"),  # the PNG signature alone
    ("iVBORw0KGgoAAAANSUhEUgAAA*AAA", "malformed base64"),  # raw base64 of a PNG, then junk
])
def test_bad_data_uris_and_base64_say_what_is_wrong(item, words):
    proc = _proc(errors="skip")
    b = proc([crop("rocket", 30, 40), item])
    err = b.errors[1]
    assert err.index == 1 and "expected" in err.reason and words in err.reason, err.reason
    assert "base64," not in (err.source or "") or err.source.endswith("chars]")  # content not logged


def test_strings_that_are_neither_keep_the_path_error(tmp_path):
    proc = _proc(errors="skip")
    for s in ["missing/abcdefghijklmnopqrstuvwxyz", "nope", str(tmp_path / "nope.jpg"),
              "QUJDREVGR0hJSktMTU5PUA=="]:  # valid base64 of text, not of an image
        err = proc([s]).errors[0]
        assert "found nothing" in err.reason, (s, err.reason)
    # A real file whose name is base64 of an image's magic is read as the file.
    png = encode(crop("coffee", 20, 30), "png")
    name = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"abcd").decode().replace("/", "_")
    (tmp_path / name).write_bytes(png)
    _same(_proc()([str(tmp_path / name)]), _proc()([png]))


def test_url_without_fetch_names_the_opt_in():
    for url in ("https://example.com/cat.jpg", "http://10.0.0.1/a.png?sig=SECRET", "s3://b/k.jpg"):
        err = _proc(errors="skip")([url]).errors[0]
        assert "URL" in err.reason and "fetch=" in err.reason and "never downloads" in err.reason
        assert "SECRET" not in str(err)  # a signed URL's query is not logged


def test_fetch_callable_bounded_by_size_and_time(files):
    seen = []

    def fetch(url):
        seen.append(url)
        return files["jpeg"] if url.endswith(".jpg") else io.BytesIO(files["png"])

    proc = _proc(fetch=fetch)
    _same(proc(["https://h/a.jpg", "https://h/b.png"]), proc([files["jpeg"], files["png"]]))
    assert seen[:2] == ["https://h/a.jpg", "https://h/b.png"]

    class Endless(io.RawIOBase):  # a server that never stops sending
        closed_by_us = False

        def readable(self):
            return True

        def readinto(self, b):
            b[:] = b"\xff" * len(b)
            return len(b)

        def close(self):
            Endless.closed_by_us = True
            super().close()

    err = _proc(fetch=lambda u: Endless(), errors="skip", max_source_bytes=1 << 20)(
        ["https://h/x"]).errors[0]
    assert "max_source_bytes" in err.reason and Endless.closed_by_us
    err = _proc(fetch=lambda u: b"\0" * ((1 << 20) + 1), errors="skip",
                max_source_bytes=1 << 20)(["https://h/x"]).errors[0]
    assert "max_source_bytes" in err.reason

    release = threading.Event()

    def hang(url):
        release.wait(30)
        return files["png"]

    try:
        err = _proc(fetch=hang, fetch_timeout_s=0.2, errors="skip")(["https://h/slow"]).errors[0]
        assert "fetch_timeout_s" in err.reason
    finally:
        release.set()

    def boom(url):
        raise ConnectionError("refused")

    err = _proc(fetch=boom, errors="skip")(["https://h/x"]).errors[0]
    assert "ConnectionError" in err.reason and isinstance(err.__cause__, ConnectionError)
    err = _proc(fetch=lambda u: "text", errors="skip")(["https://h/x"]).errors[0]
    assert "bytes or a binary file object" in err.reason
    err = _proc(fetch=lambda u: b"<html>", errors="skip")(["https://h/x"]).errors[0]
    assert "fetched from the URL" in err.reason
    with pytest.raises(TypeError, match="fetch"):
        _proc(fetch="requests")
    with pytest.raises(ValueError, match="fetch_timeout_s"):
        _proc(fetch_timeout_s=0)


def test_helpers_directly(files):
    s = base64.b64encode(files["png"]).decode()
    assert inputs.decode_base64(s) == files["png"]
    assert inputs.decode_data_uri("data:image/png;base64," + s) == files["png"]
    with pytest.raises(vlmprep.ImageError, match="max_source_bytes"):
        inputs.decode_base64(s, max_bytes=10)
    assert inputs.fetch_url("https://h", lambda u: memoryview(files["png"])) == files["png"]
