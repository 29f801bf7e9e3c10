"""Bad inputs give an ImageError naming the right index; the others are processed; the
Processor stays usable afterwards."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode
from _support.seed import SEED

import vlmprep


def _huge_png_header() -> bytes:
    # A valid PNG signature + IHDR claiming 30000x30000 (900 Mpx), and no pixel data at all.
    import struct
    import zlib
    chunk = b"IHDR" + struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


def _bad_items(tmp_path):
    jpeg = encode(crop("astronaut", 120, 160), "jpeg")
    return {
        "empty bytes": b"",
        "random bytes": random.Random(SEED).randbytes(512),
        "truncated header": jpeg[:40],
        "truncated data": jpeg[: len(jpeg) // 2],
        "huge header": _huge_png_header(),
        "float array": np.zeros((20, 20, 3), np.float32),
        "gray array": np.zeros((20, 20), np.uint8),
        "rgba array": np.zeros((20, 20, 4), np.uint8),
        "HWC tensor": torch.zeros((20, 20, 3), dtype=torch.uint8),
        "empty array": np.zeros((0, 20, 3), np.uint8),
        "missing path": str(tmp_path / "nope.jpg"),
        "directory": tmp_path,
        "aspect 300": np.zeros((1, 300, 3), np.uint8),
        "not an image": 12345,
    }


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_each_bad_input_named_by_index(tmp_path, backend):
    good = [crop("chelsea", 57, 91), encode(crop("coffee", 80, 60), "png")]
    bad = _bad_items(tmp_path)
    for label, item in bad.items():
        items = [good[0], item, good[1]]
        proc = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip")
        b = proc(items)
        assert list(b.errors) == [1], label
        err = b.errors[1]
        assert isinstance(err, vlmprep.ImageError) and isinstance(err, ValueError)
        assert err.index == 1 and err.source, label
        assert "expected" in str(err), (label, str(err))  # says what was expected and found
        assert b.image_index.tolist() == [0, 2]
        # The good images are exactly what they are alone.
        alone = proc([good[0], good[1]])
        assert torch.equal(b.pixel_values, alone.pixel_values), label
        # errors="raise": the bad one raises with its index; the processor stays usable.
        strict = vlmprep.Processor("qwen2-vl", backend=backend)
        with pytest.raises(vlmprep.ImageError) as ei:
            strict(items)
        assert ei.value.index == 1, label
        assert strict(good).num_tokens == alone.num_tokens
        # plan() agrees about header-level errors (decode errors are only known at decode).
        plan = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip").plan(items)
        if label != "truncated data":
            assert plan.images[1].error is not None and plan.images[1].num_tokens == 0, label


def test_first_bad_index_raised_before_any_decode(tmp_path, monkeypatch):
    # With errors="raise" a header-level error raises before any image is decoded.
    import vlmprep.io.decode as dec
    calls = []
    monkeypatch.setattr(dec, "decode", lambda src: calls.append(src) or None)
    with pytest.raises(vlmprep.ImageError) as ei:
        vlmprep.Processor("qwen2-vl", backend="reference")(
            [crop("chelsea", 50, 50), b"", random.Random(SEED).randbytes(64)])
    assert ei.value.index == 1 and calls == []


def test_error_message_shape():
    with pytest.raises(vlmprep.ImageError) as ei:
        vlmprep.Processor("qwen2-vl", backend="reference")([np.zeros((4, 4, 3), np.float64)])
    msg = str(ei.value)
    assert msg.startswith("image 0 numpy.ndarray(4, 4, 3) float64: expected")
    assert "got dtype float64" in msg and "convert" in msg


def test_backend_registry_errors():
    assert {"reference", "torch"} <= set(vlmprep.backends.available())
    with pytest.raises(ValueError, match=r"unknown backend 'nope'; expected one of \["):
        vlmprep.Processor("qwen2-vl", backend="nope")
    with pytest.raises(ValueError, match="device"):
        vlmprep.Processor("qwen2-vl", device="tpu")
    with pytest.raises(ValueError, match="dtype"):
        vlmprep.Processor("qwen2-vl", dtype="float16")


# -- hostile items: each is that item's ImageError, never the batch's failure ----------------------
def _released_view() -> memoryview:
    v = memoryview(bytearray(encode(crop("chelsea", 30, 40), "png")))
    v.release()
    return v


def _hostile_items(tmp_path):
    """label -> (item, words the message must contain). Each of these failed the whole
    errors="skip" call (OSError, ValueError, BufferError, NotImplementedError) or was reported
    as "found nothing"."""
    import socket
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "broken"
    link.symlink_to(tmp_path / "gone.png")
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    png = encode(crop("coffee", 40, 50), "png")
    return sock, {
        "component over 255": (str(tmp_path / ("a" * 300 + ".png")), "too long"),
        "NUL in path": (str(tmp_path / "a\0b.png"), "NUL"),
        "released memoryview": (_released_view(), "released"),
        "meta tensor": (torch.empty((3, 20, 20), dtype=torch.uint8, device="meta"), "meta"),
        "sparse tensor": (torch.zeros((3, 20, 20), dtype=torch.uint8).to_sparse(), "sparse"),
        "FIFO": (str(fifo), "FIFO"),
        "/dev/zero": ("/dev/zero", "character device"),
        "/dev/null": ("/dev/null", "character device"),
        "socket": (str(sock_path), "socket"),
        "broken symlink": (str(link), "broken symbolic link"),
        "directory": (str(tmp_path), "directory"),
        "URL": ("https://example.com/cat.jpg", "URL"),
        "data URI of a PNG signature alone": ("data:image/png;base64,iVBORw0KGgo=", "data URI"),
        "data URI of text": ("data:text/plain;base64,aGVsbG8=", "media type"),
        "closed PIL": (_closed_pil(tmp_path, png), "closed"),
        "0x0 PIL": (Image.new("RGB", (0, 0)), "at least 1x1"),
        "strided memoryview of a PNG": (memoryview(bytearray(png))[::2], "expected a JPEG/PNG"),
    }


def _closed_pil(tmp_path, png):
    p = tmp_path / "c.png"
    p.write_bytes(png)
    im = Image.open(p)
    im.close()
    return im


from PIL import Image  # noqa: E402


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_hostile_items_are_per_item_image_errors(tmp_path, backend):
    good = [crop("chelsea", 57, 91), encode(crop("coffee", 80, 60), "png")]
    proc = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip")
    alone = proc(good)
    sock, items = _hostile_items(tmp_path)
    try:
        for label, (item, words) in items.items():
            b = proc([good[0], item, good[1]])
            assert list(b.errors) == [1], label
            err = b.errors[1]
            assert type(err) is vlmprep.ImageError and err.index == 1, label
            assert "expected" in err.reason and words in err.reason, (label, err.reason)
            assert torch.equal(b.pixel_values, alone.pixel_values), label
            assert b.image_index.tolist() == [0, 2], label
            plan = proc.plan([good[0], item])
            assert plan.images[1].error is not None and plan.images[0].error is None, label
            with pytest.raises(vlmprep.ImageError) as ei:  # raise mode: the right index
                vlmprep.Processor("qwen2-vl", backend=backend)([good[0], item])
            assert ei.value.index == 1, label
    finally:
        sock.close()


def test_unexpected_backend_exception_is_that_images_error(monkeypatch):
    # A lowering that raises something other than ImageError (a library bug, a file closed
    # under a lazy PIL image) fails its image only.
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    good = [crop("chelsea", 40, 50), crop("coffee", 30, 60), crop("rocket", 50, 20)]
    want = proc([good[0], good[2]])
    run = type(proc._backend).run_image

    def flaky(self, ctx):
        if ctx.plan.index == 1:
            raise RuntimeError("injected kernel failure")
        return run(self, ctx)

    monkeypatch.setattr(type(proc._backend), "run_image", flaky)
    b = proc(good)
    assert list(b.errors) == [1] and b.errors[1].index == 1
    assert "RuntimeError" in b.errors[1].reason and "injected" in b.errors[1].reason
    assert isinstance(b.errors[1].__cause__, RuntimeError)
    assert torch.equal(b.pixel_values, want.pixel_values)
    with pytest.raises(vlmprep.ImageError) as ei:
        vlmprep.Processor("qwen2-vl", backend="reference")(good)
    assert ei.value.index == 1

    def interrupted(self, ctx):  # not a per-image cause: stops the call
        raise KeyboardInterrupt

    monkeypatch.setattr(type(proc._backend), "run_image", interrupted)
    with pytest.raises(KeyboardInterrupt):
        proc(good)


def test_lazy_pil_image_whose_file_closed_is_its_error(tmp_path):
    p = tmp_path / "lazy.png"
    p.write_bytes(encode(crop("coffee", 40, 50), "png"))
    f = open(p, "rb")
    im = Image.open(f)  # lazy: pixels are read at decode, from f
    f.close()
    b = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")([im, crop("chelsea", 30, 30)])
    assert list(b.errors) == [0] and "ValueError" in b.errors[0].reason


def _blend_on_white(img: Image.Image) -> np.ndarray:
    rgba = img.convert("RGBA")
    return np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, (255,) * 4), rgba)
                      .convert("RGB"))


def _accepted_items(tmp_path):
    """label -> (item, the RGB uint8 array it must give the same output as)."""
    a = crop("astronaut", 37, 53)
    wide = np.ascontiguousarray(np.concatenate([a, a[::-1]], axis=1))
    mm = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.uint8, shape=a.shape)
    mm[:] = a
    ro = np.frombuffer(a.tobytes(), np.uint8).reshape(a.shape)  # read-only
    png = encode(a, "png")
    gray16 = (crop("camera", 37, 53)[..., 0].astype(np.uint16) * 257 + 3)
    p = tmp_path / "lazy.png"
    p.write_bytes(png)
    ptrns = Image.fromarray(a).convert("P")
    ptrns.info["transparency"] = int(np.asarray(ptrns)[0, 0])
    la = Image.fromarray(np.stack([a[..., 0], a[..., 1]], -1), "LA")
    t = torch.from_numpy(wide.copy()).permute(2, 0, 1)

    class Bytes2(bytes):
        pass

    class Array2(np.ndarray):
        pass

    return {
        "np.memmap": (mm, a),
        "ndarray subclass": (a.view(Array2), a),
        "read-only": (ro, a),
        "non-contiguous": (wide[:, ::2], wide[:, ::2]),
        "negative strides": (a[::-1, ::-1], a[::-1, ::-1]),
        "0-stride broadcast": (np.broadcast_to(a[:1, :1], a.shape), np.broadcast_to(a[:1, :1], a.shape)),
        "tensor CHW view of HWC": (torch.from_numpy(a).permute(2, 0, 1), a),
        "tensor other strides": (t[:, :, ::2], wide[:, ::2]),
        "tensor expanded": (torch.tensor([7, 8, 9], dtype=torch.uint8)[:, None, None].expand(3, 37, 53),
                            np.broadcast_to(np.array([7, 8, 9], np.uint8), a.shape)),
        "tensor flipped": (t.flip(1), wide[::-1]),
        "nn.Parameter": (torch.nn.Parameter(torch.from_numpy(a).permute(2, 0, 1).contiguous(),
                                            requires_grad=False), a),
        "bytes subclass": (Bytes2(png), a),
        "bytearray": (bytearray(png), a),
        "memoryview of int32": (memoryview(np.frombuffer(png + b"\0" * (-len(png) % 4), np.int32)), a),
        "PIL lazy (unloaded)": (Image.open(p), a),
        "PIL CMYK": (Image.fromarray(a).convert("CMYK"), np.asarray(Image.fromarray(a).convert("CMYK").convert("RGB"))),
        "PIL 1": (Image.fromarray(a).convert("1"), np.asarray(Image.fromarray(a).convert("1").convert("RGB"))),
        "PIL F": (Image.fromarray(a[..., 0]).convert("F"), np.repeat(a[..., :1], 3, 2)),
        "PIL I;16": (Image.fromarray(gray16),
                     np.repeat(((gray16.astype(np.int64) + 128) // 257).astype(np.uint8)[..., None], 3, 2)),
        "PIL LA": (la, _blend_on_white(la)),
        "PIL P with tRNS": (ptrns, _blend_on_white(ptrns)),
    }


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_odd_but_valid_items_equal_their_plain_array(tmp_path, backend):
    proc = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip")
    for label, (item, want) in _accepted_items(tmp_path).items():
        got = proc([item])
        assert not got.errors, (label, got.errors)
        ref = proc([np.ascontiguousarray(want)])
        assert torch.equal(got.pixel_values, ref.pixel_values), label
        assert got.num_tokens == ref.num_tokens, label


def test_huge_zero_stride_view_costs_no_memory():
    # 100000 x 100000 x 3 "pixels" in 3 bytes: rejected from the shape, never copied or hashed.
    from vlmprep.cache import OutputCache
    huge = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (100_000, 100_000, 3))
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([huge, crop("chelsea", 20, 20)])
    assert list(b.errors) == [0] and "source pixels" in b.errors[0].reason
    assert OutputCache(1 << 20).key_for(huge, proc) is None


def test_max_source_bytes_rejects_from_the_size(tmp_path, monkeypatch):
    png = encode(crop("coffee", 80, 60), "png")
    sparse = tmp_path / "sparse.jpg"  # 2 GiB on disk by its size, a JPEG header, no blocks
    with open(sparse, "wb") as f:
        f.write(encode(crop("chelsea", 16, 16), "jpeg")[:200])
        f.truncate(2 << 30)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    b = proc([sparse, png])
    assert list(b.errors) == [0] and b.errors[0].index == 0
    assert "at most 268,435,456 bytes" in b.errors[0].reason
    assert "2,147,483,648" in b.errors[0].reason and "max_source_bytes" in b.errors[0].reason
    small = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip",
                              max_source_bytes=len(png) - 1)
    b = small([png, bytearray(png), memoryview(png), crop("chelsea", 20, 20)])
    assert list(b.errors) == [0, 1, 2] and all("max_source_bytes" in e.reason
                                               for e in b.errors.values())
    p = tmp_path / "x.png"
    p.write_bytes(png)
    assert list(small([p]).errors) == [0]
    assert not vlmprep.Processor("qwen2-vl", backend="reference", max_source_bytes=len(png))([p]).errors


def test_special_files_are_never_opened(tmp_path, monkeypatch):
    # Even open() of a FIFO blocks; reading /dev/zero never ends: neither may ever be opened.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    import builtins
    real_bopen = builtins.open
    monkeypatch.setattr(builtins, "open",
                        lambda p, *a, **k: opened.append(str(p)) or real_bopen(p, *a, **k))
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([str(fifo), "/dev/zero", "/dev/urandom", crop("chelsea", 20, 20)])
    assert list(b.errors) == [0, 1, 2]
    assert not {str(fifo), "/dev/zero", "/dev/urandom"} & set(opened), opened


def test_path_messages_say_what_was_found(tmp_path, monkeypatch):
    f = tmp_path / "f.png"
    f.write_bytes(encode(crop("coffee", 20, 20), "png"))
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    cases = {str(f / "child.png"): "not a directory", str(loop): "loop of symbolic links",
             str(tmp_path / "none.png"): "found nothing"}
    b = proc(list(cases))
    for k, words in enumerate(cases.values()):
        assert words in b.errors[k].reason, (words, b.errors[k].reason)
    # Permission denied (root reads anything, so the denial is simulated at stat).
    real_stat = os.stat

    def deny(p, *a, **kw):
        if str(p) == str(f):
            raise PermissionError(13, "Permission denied", str(p))
        return real_stat(p, *a, **kw)

    monkeypatch.setattr(os, "stat", deny)
    e = proc([f]).errors[0]
    assert "permission denied" in e.reason and "read access" in e.reason


def test_transposed_arrays_say_transpose():
    # A CHW numpy array or an HWC torch tensor: the hint is the transpose, not "stack gray".
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([np.zeros((3, 20, 30), np.uint8), torch.zeros((20, 30, 3), dtype=torch.uint8),
              np.zeros((20, 30, 4), np.uint8), torch.zeros((1, 20, 30), dtype=torch.uint8)])
    assert "got CHW, expected HWC: transpose (e.g. a.transpose(1, 2, 0))" in b.errors[0].reason
    assert "got HWC, expected CHW: transpose (e.g. t.permute(2, 0, 1))" in b.errors[1].reason
    for k in (2, 3):  # real channel counts other than 3 keep their hint
        assert "stack gray to 3 channels" in b.errors[k].reason and "transpose" not in b.errors[k].reason
