"""Issue 33's repros, each in a fresh process: outcome, wall time and peak memory, before and after.

    # 'before': a pristine copy of the baseline (HEAD), with the built kernels copied in
    git -C /work/main worktree add /tmp/before HEAD
    cp vlmprep/kernels/_vlmprep_torch.so vlmprep/kernels/libvlmprep_dali.so \\
       vlmprep/kernels/_build_info.json /tmp/before/vlmprep/kernels/
    .venv/bin/python bench/issue33_repros.py --tree /tmp/before --tag before
    # 'after': the fixed checkout
    .venv/bin/python bench/issue33_repros.py --tree /work/main --tag after
    # one or a few repros, a shorter limit, the table of a saved run
    .venv/bin/python bench/issue33_repros.py --tree . --tag try --only 1a,3,10 --limit 60
    .venv/bin/python bench/issue33_repros.py --table bench/results/issue33_before.json

Every repro's inputs are built here (stdlib, Pillow, numpy, pyarrow; never with vlmprep), byte for
byte the same for every tree, in a temp folder; then the repro runs in a fresh child process
(this file with ``--child``) whose ``PYTHONPATH`` is ``--tree``, so ``import vlmprep`` is that
tree's (the child records ``vlmprep.__file__``). Per repro:

- outcome: what the tree did (error message's first 120 characters, ok / error rows, the job's
  complete flag, the CLI's exit status), from the child's result file;
- exit: the child's exit code, or the signal that ended it; ``killed at limit`` past ``--limit``
  seconds (SIGKILL to the child's process group), ``killed at memory cap`` past ``--mem-cap-mb``
  (summed RSS of the group, sampled every 0.1 s: protects the shared machine);
- wall_s: the child's wall time (interpreter start and ``import vlmprep`` included);
- peak_rss_mb: ``ru_maxrss`` of the child from ``os.wait4`` (the largest of it and the
  descendants it waited for), and ``base_rss_mb``: the child's peak just before the operation
  (imports, Processor, inputs read), so ``peak - base`` is the operation's own. The inputs are
  built in a process of their own, because a child's ``ru_maxrss`` starts at the peak of the
  process it was forked from (``parent_peak_rss_mb`` in the JSON shows this one stayed small).

Writes ``bench/results/issue33_<tag>.json`` (rows, the tree's commit and ``git status``, the
load average before each repro) and prints a markdown table. Repros run one at a time (the
machine is shared). Sizes are the issue's unless the row's ``scale`` says otherwise (the biggest
ones are scaled to stay under ~2 min and ~6 GB on a 2-core, 24 GiB machine). Not run: the ones
that need the network (a missing ``org/name`` folder tried on the Hub, ``pip wheel`` with build
isolation) and the Ray Data example (a hang by design on 2 CPUs).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ENV_MARKER = "I33_ENV_MARKER_5f3a9c"  # a value only /proc/self/environ of the child holds


# =============================================================================================
# inputs (built in the parent, identical for every tree)
# =============================================================================================
def _jpeg(i: int, size: tuple[int, int] = (48, 40)) -> bytes:
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(i)
    arr = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(arr).save(b, "JPEG", quality=90)
    return b.getvalue()


def _png(i: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """An opaque 8-bit RGB PNG (the kind the OpenCV fast path decodes)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(100 + i)
    arr = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(arr).save(b, "PNG")
    return b.getvalue()


def _wds_tar(n: int, fmt: int = tarfile.USTAR_FORMAT,
             pax: dict[tuple[int, str], dict] | None = None) -> tuple[bytes, dict]:
    """A WebDataset tar: n samples, each KEY.jpg then KEY.txt (a caption). Returns the bytes and
    {(i, ext): (header offset, data offset, data size)}."""
    bio = io.BytesIO()
    where = {}
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        for i in range(n):
            for ext, data in (("jpg", _jpeg(i)), ("txt", f"a caption for sample {i}: ".encode()
                                                  + b"words " * 12)):
                ti = tarfile.TarInfo(f"{i:06d}.{ext}")
                ti.size = len(data)
                ti.mtime = 1_700_000_000
                if pax and (i, ext) in pax:
                    ti.pax_headers = dict(pax[(i, ext)])
                start = bio.tell()
                tf.addfile(ti, io.BytesIO(data))
                end = bio.tell()
                padded = (len(data) + 511) // 512 * 512
                where[(i, ext)] = (start, end - padded, len(data))
    return bio.getvalue(), where


def build_tar_cut(work: Path, n: int, cut_sample: int, name: str) -> dict:
    """The file ends inside sample ``cut_sample``'s caption (a truncated copy or download)."""
    raw, where = _wds_tar(n)
    _, data_at, size = where[(cut_sample, "txt")]
    cut = data_at + size // 2
    (work / name).write_bytes(raw[:cut])
    return {"file": name, "samples_written": n, "cut_at_byte": cut, "of_bytes": len(raw),
            "inside": f"{cut_sample:06d}.txt"}


def build_tar_splice(work: Path) -> dict:
    """20 bytes taken out of the middle of sample 1's caption; the rest of the tar follows."""
    raw, where = _wds_tar(8)
    _, data_at, size = where[(1, "txt")]
    a = data_at + size // 2
    (work / "spliced.tar").write_bytes(raw[:a] + raw[a + 20:])
    return {"file": "spliced.tar", "samples_written": 8, "removed": [a, a + 20],
            "inside": "000001.txt"}


def build_tar_pax(work: Path, mode: str) -> dict:
    """A pax header on sample 1's caption whose ``size`` lies (the ustar size field is 0, as
    tarfile writes it when pax carries the size; the real data follows). ``past_end``: a size
    past the end of the file; ``swallow``: a size that jumps exactly onto sample 6's header,
    hiding samples 2-5 inside the caption."""
    width = 12
    placeholder = {(1, "txt"): {"size": "9" * width}}
    raw, where = _wds_tar(8, tarfile.PAX_FORMAT, placeholder)
    _, data_at, _ = where[(1, "txt")]
    if mode == "past_end":
        lie = len(raw) * 4
    else:
        lie = where[(6, "jpg")][0] - data_at
    raw2, where2 = _wds_tar(8, tarfile.PAX_FORMAT, {(1, "txt"): {"size": f"{lie:0{width}d}"}})
    assert where2 == where and len(raw2) == len(raw)
    name = f"pax_{mode}.tar"
    (work / name).write_bytes(raw2)
    return {"file": name, "samples_written": 8, "pax_size": lie,
            "real_size": where[(1, "txt")][2], "on": "000001.txt"}


def build_host_paths(work: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    lines = ["../../../../etc/passwd", "/proc/self/environ"]  # the (root: /tmp/X/rN)
    struct_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    image = pa.array([{"bytes": None, "path": lines[0]}, {"bytes": None, "path": lines[1]},
                      {"bytes": _jpeg(7), "path": None}], struct_t)
    pq.write_table(pa.table({"image": image}), work / "paths.parquet")
    (work / "paths.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"files": ["paths.parquet", "paths.txt"], "paths": lines,
            "parquet_rows": "2 paths + 1 jpeg"}


def gif_bomb(width: int, height: int, frames: int, delay_cs: int, spread: bool = True,
             loop: bool = False) -> bytes:
    """An animated GIF of ``frames`` 1x1 frames on a WxH canvas (23 bytes a frame; 20 bytes of
    header and trailer, 19 more with the NETSCAPE loop extension)."""
    out = bytearray(b"GIF89a")
    out += struct.pack("<HHBBB", width, height, 0x80, 0, 0)  # global table of 2 colours
    out += b"\x00\x00\x00\xff\xff\xff"
    if loop:
        out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    for k in range(frames):
        x = (k * 7919) % width if spread else 0
        y = (k * 104729) % height if spread else 0
        out += b"\x21\xf9\x04\x00" + struct.pack("<H", delay_cs) + b"\x00\x00"
        out += b"\x2c" + struct.pack("<HHHHB", x, y, 1, 1, 0)
        out += b"\x02\x02\x44\x01\x00"  # LZW min code 2; clear, 0, end
    out += b"\x3b"
    return bytes(out)


def _vp8l_1x1() -> bytes:
    """The VP8L chunk (fourcc, size, payload, pad) of a 1x1 lossless WebP made by Pillow."""
    from PIL import Image
    b = io.BytesIO()
    Image.new("RGBA", (1, 1), (200, 30, 30, 255)).save(b, "WEBP", lossless=True)
    data = b.getvalue()
    pos = 12
    while pos + 8 <= len(data):
        fourcc, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        if fourcc == b"VP8L":
            return data[pos:pos + 8 + size + (size & 1)]
        pos += 8 + size + (size & 1)
    raise RuntimeError("Pillow wrote no VP8L chunk")


def webp_bomb(width: int, height: int, frames: int, duration_ms: int) -> bytes:
    """An animated WebP (VP8X + ANIM + ``frames`` ANMF chunks of a 1x1 lossless frame)."""
    vp8l = _vp8l_1x1()

    def chunk(fourcc: bytes, body: bytes) -> bytes:
        return fourcc + struct.pack("<I", len(body)) + body + (b"\x00" if len(body) & 1 else b"")

    def u24(v: int) -> bytes:
        return v.to_bytes(3, "little")

    body = chunk(b"VP8X", bytes([0x12, 0, 0, 0]) + u24(width - 1) + u24(height - 1))
    body += chunk(b"ANIM", b"\x00\x00\x00\xff" + struct.pack("<H", 0))
    for k in range(frames):
        x = ((k * 7919) % width) // 2
        y = ((k * 104729) % height) // 2
        body += chunk(b"ANMF", u24(x) + u24(y) + u24(0) + u24(0) + u24(duration_ms) + b"\x00"
                      + vp8l)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def build_gif85(work: Path) -> dict:
    data = gif_bomb(13000, 13000, 2, 10, spread=False, loop=True)
    assert len(data) == 85, len(data)
    (work / "bomb85.gif").write_bytes(data)
    return {"file": "bomb85.gif", "bytes": len(data), "canvas": "13000x13000", "frames": 2}


# Sizes of repro 5 (the files were 6.9 KB / 10 KB; its canvas and sampling are not
# given): ~7 KB / ~10 KB of 1x1 frames on a canvas that the plan accepts with 4 sampled frames
# (Video(num_frames=4): 4 x canvas <= max_total_pixels), so the frames between samples are
# composed but not kept.
GIF7K = dict(width=8000, height=8000, frames=310, delay_cs=2)
WEBP10K = dict(width=8000, height=8000, frames=200, duration_ms=20)


def build_anim(work: Path, kind: str) -> dict:
    if kind == "gif":
        data = gif_bomb(GIF7K["width"], GIF7K["height"], GIF7K["frames"], GIF7K["delay_cs"])
        name = "many.gif"
        params = GIF7K
    else:
        data = webp_bomb(WEBP10K["width"], WEBP10K["height"], WEBP10K["frames"],
                         WEBP10K["duration_ms"])
        name = "many.webp"
        params = WEBP10K
    (work / name).write_bytes(data)
    return {"file": name, "bytes": len(data), **params}


def build_data_uri(work: Path, mb: float) -> dict:
    """``data:image/png,<every byte as %XX>`` of a small PNG followed by zero bytes (after IEND,
    which decoders ignore), ``mb`` MB of URI in all."""
    png = _png(3)
    total_bytes = int(mb * 1_000_000) // 3  # 3 characters per byte
    raw = png + b"\x00" * max(0, total_bytes - len(png))
    hexes = raw.hex().upper()
    with open(work / "uri.txt", "w", encoding="ascii") as f:
        f.write("data:image/png,")
        step = 3 << 20
        for i in range(0, len(hexes), step):
            chunk = hexes[i:i + step]
            f.write("".join("%" + chunk[j:j + 2] for j in range(0, len(chunk), 2)))
    return {"file": "uri.txt", "uri_bytes": (work / "uri.txt").stat().st_size,
            "decoded_bytes": len(raw)}


def build_parquet_zstd(work: Path, mb: int = 300) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    value = _png(4) + b"\x00" * (mb * 1_000_000)
    t = pa.table({"image": pa.array([value], pa.binary())})
    del value
    pq.write_table(t, work / "zstd.parquet", compression="zstd", compression_level=19)
    return {"file": "zstd.parquet", "file_bytes": (work / "zstd.parquet").stat().st_size,
            "value_bytes": t.column(0)[0].as_buffer().size}


def build_photos(work: Path, n: int = 3) -> dict:
    d = work / "photos"
    d.mkdir()
    for i in range(n):
        (d / f"p{i}.jpg").write_bytes(_jpeg(i))
    return {"folder": "photos", "images": n}


def build_quickstart(work: Path) -> dict:
    """The README quickstart's inputs, several of each kind so the threads decode JPEG and PNG
    at once: photo.jpg (1920x1080), PNGs (opaque RGB) and a PIL image (saved as pil.png)."""
    (work / "photo.jpg").write_bytes(_jpeg(11, (1920, 1080)))
    (work / "photo2.jpg").write_bytes(_jpeg(12, (1600, 1200)))
    (work / "a.png").write_bytes(_png(13, (640, 480)))
    (work / "b.png").write_bytes(_png(14, (320, 240)))
    (work / "pil.png").write_bytes(_png(15, (200, 150)))
    return {"files": ["photo.jpg", "photo2.jpg", "a.png", "b.png", "pil.png"]}


def build_png(work: Path) -> dict:
    (work / "first.png").write_bytes(_png(21, (640, 480)))
    return {"file": "first.png"}


# =============================================================================================
# child side (runs with PYTHONPATH = the tree)
# =============================================================================================
def _hwm_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


class Child:
    def __init__(self, work: Path, result_path: Path):
        self.work = work
        self.result_path = result_path
        self.res: dict = {}

    def base(self) -> None:
        """The peak so far: imports, Processor, inputs read (before the measured operation)."""
        self.res["base_rss_mb"] = _hwm_mb()
        self.save()

    def save(self) -> None:
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.res, default=str), encoding="utf-8")
        os.replace(tmp, self.result_path)


def _short(text: object, n: int = 120) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[:n - 3] + "..."


def _cli(argv: list[str]) -> dict:
    """``vlmprep ARGV`` in this process (``python -m vlmprep``, run here) -> rc, stdout, stderr."""
    import contextlib
    import runpy

    out, err = io.StringIO(), io.StringIO()
    saved, sys.argv = sys.argv, ["vlmprep", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("vlmprep", run_name="__main__")
            rc = 0
        except SystemExit as e:  # vlmprep/__main__.py exits with main's status
            rc = e.code if isinstance(e.code, int) else 2
        finally:
            sys.argv = saved
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _shard_rows(out_dir: Path) -> dict:
    """ok / error rows over the job's shards, its complete flag and the error texts."""
    import pyarrow.parquet as pq
    man_path = out_dir / "manifest.json"
    man = json.loads(man_path.read_text()) if man_path.exists() else None
    ok = err = 0
    errors: list[str] = []
    for p in sorted(out_dir.glob("*.parquet")):
        t = pq.read_table(p, columns=["id", "status", "error"])
        for sid, status, e in zip(*(t.column(c).to_pylist() for c in ("id", "status", "error"))):
            if status == "ok":
                ok += 1
            else:
                err += 1
                errors.append(f"{sid}: {e}")
    return {"complete": None if man is None else man.get("complete"), "ok_rows": ok,
            "error_rows": err, "errors": errors,
            "units": None if man is None else man.get("units")}


def _samples(paths: list[str]) -> dict:
    from vlmprep.batch.sources import discover
    units = discover(paths)
    rows = []
    for u in units:
        for s in u.samples():
            rows.append({"id": s.id, "bytes": None if s.data is None else len(s.data),
                         "error": s.error})
    ok = sum(r["bytes"] is not None for r in rows)
    return {"counts": {u.name: u.count() for u in units}, "ok": ok, "errors": len(rows) - ok,
            "rows": rows}


def _run_job(c: Child, inputs: list[str], extra: tuple[str, ...] = ()) -> dict:
    out = c.work / "out"
    r = _cli(["run", "--preset", "qwen2-vl", "--input", *inputs, "--output", str(out),
              "--no-progress", *extra])
    info = _shard_rows(out) if out.exists() else {"complete": None, "ok_rows": 0,
                                                  "error_rows": 0, "errors": []}
    return {"rc": r["rc"], "message": _short(r["stderr"].strip().splitlines()[-1]
                                             if r["stderr"].strip() else ""), **info}


def child_tar_samples(c: Child, file: str) -> None:
    c.base()
    try:
        s = _samples([str(c.work / file)])
    except ValueError as e:
        c.res.update(outcome=f"discover refused: {_short(e)}", error=str(e))
        return
    first_err = next((r["error"] for r in s["rows"] if r["error"]), None)
    c.res.update(s, outcome=f"{s['ok']} sample(s) read, {s['errors']} error row(s)"
                 + (f"; first error: {_short(first_err)}" if first_err else ""))


def child_tar_job(c: Child, file: str) -> None:
    import vlmprep  # noqa: F401
    c.base()
    j = _run_job(c, [str(c.work / file)])
    first = j["errors"][0] if j["errors"] else j["message"]
    c.res.update(job=j, outcome=(f"rc {j['rc']}, complete={j['complete']}, rows ok={j['ok_rows']} "
                                 f"err={j['error_rows']}" + (f"; {_short(first)}" if first else "")))


def child_host_paths(c: Child) -> None:
    import vlmprep  # noqa: F401
    c.base()
    # a leak shows the file's first bytes as a bytes repr (b'root:x:0...'): look for its first 6
    markers = {f: repr(Path(f).read_bytes()[:6])[2:-1] for f in ("/etc/passwd", "/proc/self/environ")}
    try:
        s = _samples([str(c.work / "paths.parquet"), str(c.work / "paths.txt")])
        read = [r for r in s["rows"] if r["bytes"] is not None and r["id"] != "row-2"]
        sample_info = {"samples": s["rows"], "host_files_read": len(read)}
    except ValueError as e:
        sample_info = {"discover_error": str(e), "host_files_read": 0}
    j = _run_job(c, [str(c.work / "paths.parquet"), str(c.work / "paths.txt")])
    leaks = {k: sum(m in e for e in j["errors"]) for k, m in markers.items()}
    c.res.update(sample_info, job=j, markers=markers, leaks=leaks,
                 outcome=(f"host files read by the reader: {sample_info['host_files_read']}/4; "
                          f"file content in the error column: passwd {leaks['/etc/passwd']} rows, "
                          f"environ {leaks['/proc/self/environ']} rows; job rc {j['rc']}, "
                          f"complete={j['complete']}, ok={j['ok_rows']} err={j['error_rows']}; "
                          f"{_short(j['errors'][0] if j['errors'] else j['message'], 90)}"))


def _processor(**kw):
    import vlmprep
    return vlmprep.Processor("qwen2-vl", backend="auto", device="cpu", dtype="float32",
                             errors="skip", **kw)


def child_video(c: Child, arg: str) -> None:
    """``arg``: FILE, or FILE:N for ``vlmprep.Video(bytes, num_frames=N)`` (sparse samples)."""
    import vlmprep
    from vlmprep.io.video import VideoLimits
    file, _, n = arg.partition(":")
    proc = _processor(video_limits=VideoLimits(timeout_s=60.0))
    data = (c.work / file).read_bytes()
    item = vlmprep.Video(data, num_frames=int(n)) if n else data
    c.base()
    t0 = time.perf_counter()
    try:
        batch = proc(videos=[item])
        v = batch.videos
        errs = {int(k): str(e) for k, e in v.errors.items()}
        if errs:
            outcome = f"error: {_short(next(iter(errs.values())))}"
        else:
            outcome = f"ok: pixel_values {tuple(v.pixel_values.shape)}"
        c.res.update(errors=errs)
    except Exception as e:  # noqa: BLE001 (recorded: an exception out of errors="skip" is a finding)
        outcome = f"raised {type(e).__name__}: {_short(e)}"
    call_s = round(time.perf_counter() - t0, 2)
    c.res.update(call_s=call_s, outcome=f"{outcome} (call {call_s} s)")


def child_data_uri(c: Child) -> None:
    proc = _processor()
    uri = (c.work / "uri.txt").read_text(encoding="ascii")
    c.base()
    t0 = time.perf_counter()
    try:
        batch = proc([uri])
        if batch.errors:
            outcome = f"error: {_short(str(next(iter(batch.errors.values()))))}"
        else:
            outcome = f"ok: pixel_values {tuple(batch.pixel_values.shape)}"
    except Exception as e:  # noqa: BLE001
        outcome = f"raised {type(e).__name__}: {_short(e)}"
    call_s = round(time.perf_counter() - t0, 2)
    c.res.update(call_s=call_s, outcome=f"{outcome} (call {call_s} s)")


def child_parquet_zstd(c: Child) -> None:
    import vlmprep  # noqa: F401
    c.base()
    try:
        s = _samples([str(c.work / "zstd.parquet")])
        first = next((r["error"] for r in s["rows"] if r["error"]), None)
        c.res.update(s, outcome=f"{s['ok']} read, {s['errors']} error row(s)"
                     + (f": {_short(first)}" if first else ""))
    except ValueError as e:
        c.res.update(outcome=f"discover refused: {_short(e)}")


def child_manifest_setup(c: Child) -> None:
    j = _run_job(c, [str(c.work / "photos")])
    c.res.update(job=j, outcome=f"setup job rc {j['rc']}, complete={j['complete']}")


def child_manifest_overwrite(c: Child) -> None:
    import vlmprep  # noqa: F401
    c.base()
    j = _run_job(c, [str(c.work / "photos")], ("--overwrite",))
    c.res.update(job=j, outcome=(f"rc {j['rc']}, complete={j['complete']}, rows ok={j['ok_rows']}"
                                 f" err={j['error_rows']}"
                                 + (f"; {j['message']}" if j["message"] else "")))


def child_quickstart(c: Child) -> None:
    import numpy as np  # noqa: F401
    from PIL import Image

    import vlmprep
    os.chdir(c.work)
    proc = vlmprep.Processor("qwen2-vl", backend="auto", device="cpu", dtype="float32",
                             errors="skip")
    png_bytes = Path("a.png").read_bytes()
    png2 = Path("b.png").read_bytes()
    pil_image = Image.open("pil.png").convert("RGB")
    plan = proc.plan(["photo.jpg", png_bytes])
    c.base()
    batch = proc(["photo.jpg", png_bytes, pil_image, "photo2.jpg", png2, "photo.jpg"])
    c.res.update(outcome=f"ok: {len(batch.cu_seqlens) - 1} images, {len(batch.errors)} errors",
                 tokens=plan.num_tokens)


def child_loop_gap(c: Child) -> None:
    import asyncio

    import vlmprep
    from vlmprep.serve import Batcher
    png = (c.work / "first.png").read_bytes()
    proc = vlmprep.Processor("qwen2-vl", backend="auto", device="cpu", dtype="float32",
                             errors="skip")
    c.base()

    async def main() -> dict:
        loop = asyncio.get_running_loop()
        gaps: list[float] = []
        stop = False

        async def meter() -> None:
            last = loop.time()
            while not stop:
                await asyncio.sleep(0.001)
                now = loop.time()
                gaps.append(now - last)
                last = now

        task = asyncio.create_task(meter())
        await asyncio.sleep(0.2)
        idle = max(gaps) * 1000
        gaps.clear()
        b = Batcher(proc, max_delay_ms=1.0)
        await asyncio.sleep(0.05)
        construct = max(gaps) * 1000 if gaps else 0.0
        gaps.clear()
        t0 = loop.time()
        r = await b.submit([png])
        first_s = loop.time() - t0
        first = max(gaps) * 1000 if gaps else 0.0
        later = []
        for _ in range(5):
            gaps.clear()
            await b.submit([png])
            later.append(max(gaps) * 1000 if gaps else 0.0)
        stop = True
        await task
        await b.close()
        return {"idle_gap_ms": round(idle, 1), "construct_gap_ms": round(construct, 1),
                "first_request_gap_ms": round(first, 1), "first_request_s": round(first_s, 3),
                "later_gaps_ms": [round(x, 1) for x in later], "first_ok": not r.errors}

    g = asyncio.run(main())
    c.res.update(g, outcome=(f"max loop gap: first request {g['first_request_gap_ms']} ms, later "
                             f"{max(g['later_gaps_ms'])} ms, Batcher() {g['construct_gap_ms']} ms "
                             f"(idle meter {g['idle_gap_ms']} ms)"))


def child_plan_path(c: Child) -> None:
    r = _cli(["plan", "--preset", "/models/Qwen2-VL-7B-Instruct", "--size", "640x480"])
    msg = r["stderr"].strip()
    says = bool(re.search(r"not exist|no such|not found|missing", msg, re.I))
    c.res.update(rc=r["rc"], message=msg, says_path_missing=says,
                 outcome=f"rc {r['rc']}; names the missing path: {says}; {_short(msg)}")


def child_plan_typo(c: Child) -> None:
    r = _cli(["plan", "--preset", "qwen2vl", "--size", "640x480"])
    msg = r["stderr"].strip()
    says = "did you mean" in msg.lower()
    c.res.update(rc=r["rc"], message=msg, did_you_mean=says,
                 outcome=f"rc {r['rc']}; did you mean: {says}; {_short(msg)}")


def child_dali(c: Child) -> None:
    import vlmprep
    try:
        proc = vlmprep.Processor("qwen2-vl", backend="dali", device="cpu", errors="skip")
    except Exception as e:  # noqa: BLE001 (no DALI here)
        c.res.update(outcome=f"not run: {_short(e)}", skipped=True)
        return
    c.base()
    batch = proc([_jpeg(1, (320, 240))])
    c.res.update(outcome=f"ok={len(batch.errors) == 0} (AutoGraph warning: see stderr check)")


CHILDREN: dict[str, Any] = {
    "tar_samples": child_tar_samples, "tar_job": child_tar_job, "host_paths": child_host_paths,
    "video": child_video, "data_uri": child_data_uri, "parquet_zstd": child_parquet_zstd,
    "manifest_setup": child_manifest_setup, "manifest_overwrite": child_manifest_overwrite,
    "quickstart": child_quickstart, "loop_gap": child_loop_gap, "plan_path": child_plan_path,
    "plan_typo": child_plan_typo, "dali": child_dali,
}


def child_main(name: str, work: str, result: str, arg: str | None) -> int:
    c = Child(Path(work), Path(result))
    import vlmprep
    c.res["vlmprep_file"] = vlmprep.__file__
    c.save()
    try:
        fn = CHILDREN[name]
        fn(c, arg) if arg is not None else fn(c)
    except Exception as e:  # noqa: BLE001 (the outcome of a repro that raised)
        import traceback
        c.res.update(outcome=f"raised {type(e).__name__}: {_short(e)}",
                     traceback=traceback.format_exc()[-3000:])
    c.res["hwm_mb"] = _hwm_mb()
    c.save()
    return 0


# =============================================================================================
# parent side
# =============================================================================================
REPROS: list[dict[str, Any]] = [
    dict(id="1a", title="WebDataset tar (8 samples, jpg+txt) cut inside sample 0's caption: "
                        "discover + samples",
         build=lambda w: build_tar_cut(w, 8, 0, "cut.tar"), child="tar_samples", arg="cut.tar"),
    dict(id="1b", title="tar with 20 bytes removed inside sample 1's caption (the rest follows): "
                        "discover + samples",
         build=build_tar_splice, child="tar_samples", arg="spliced.tar"),
    dict(id="1c", title="`vlmprep run` over a 9-sample tar cut inside sample 3's caption",
         build=lambda w: build_tar_cut(w, 9, 3, "cut9.tar"), child="tar_job", arg="cut9.tar"),
    dict(id="2a", title="tar, pax header on sample 1's caption with a size past the end of the "
                        "file: discover + samples",
         build=lambda w: build_tar_pax(w, "past_end"), child="tar_samples", arg="pax_past_end.tar"),
    dict(id="2b", title="tar, pax header on sample 1's caption whose size jumps onto sample 6's "
                        "header: discover + samples",
         build=lambda w: build_tar_pax(w, "swallow"), child="tar_samples", arg="pax_swallow.tar"),
    dict(id="3", title="parquet struct<bytes,path> + list file with ../../../../etc/passwd and "
                       "/proc/self/environ: reader + `vlmprep run`",
         build=build_host_paths, child="host_paths"),
    dict(id="4", title="85-byte animated GIF, 13000x13000 canvas, as a video (qwen2-vl)",
         build=build_gif85, child="video", arg="bomb85.gif"),
    dict(id="5a", title="~7 KB animated GIF, 310 1x1 frames on an 8000x8000 canvas, as "
                        "Video(num_frames=4), timeout_s=60",
         build=lambda w: build_anim(w, "gif"), child="video", arg="many.gif:4",
         scale="canvas 8000x8000 (the issue's canvas is not given)"),
    dict(id="5b", title="~10 KB animated WebP, 200 1x1 frames on an 8000x8000 canvas, as "
                        "Video(num_frames=4), timeout_s=60",
         build=lambda w: build_anim(w, "webp"), child="video", arg="many.webp:4",
         scale="canvas 8000x8000 (the issue's canvas is not given)"),
    dict(id="6a", title="percent-encoded data: URI of 31 MB as an image",
         build=lambda w: build_data_uri(w, 31), child="data_uri"),
    dict(id="6b", title="percent-encoded data: URI as an image, the issue's 209 MB scaled",
         build=lambda w: build_data_uri(w, 62), child="data_uri",
         scale="62 MB, not 209 MB (209 MB took 17.7 GB before)"),
    dict(id="7", title="parquet holding one 300 MB zstd value: discover + samples",
         build=build_parquet_zstd, child="parquet_zstd"),
    dict(id="8", title="manifest with units.photos.parts = 10^7, then `vlmprep run --overwrite`",
         build=build_photos, child="manifest_overwrite", setup="manifest_setup",
         tamper=lambda w: _tamper_manifest(w)),
    dict(id="9", title="README quickstart (JPEG/PNG/PIL mixed) in fresh processes under load",
         build=build_quickstart, child="quickstart", runs=8),
    dict(id="10", title="Batcher loop gap, first request a PNG (1 ms meter)",
         build=build_png, child="loop_gap"),
    dict(id="11a", title="`vlmprep plan --preset /models/Qwen2-VL-7B-Instruct` (a missing path)",
         build=None, child="plan_path"),
    dict(id="11b", title="`vlmprep plan --preset qwen2vl` (a mistyped preset)",
         build=None, child="plan_typo"),
    dict(id="11c", title="dali backend run: AutoGraph warning on stderr",
         build=None, child="dali", stderr_check=r"AutoGraph"),
    dict(id="11d", title="docs/how-to/batch.md: rows of `--set` in the flag table", static="set_rows"),
]


def _tamper_manifest(work: Path) -> dict:
    p = work / "out" / "manifest.json"
    m = json.loads(p.read_text())
    unit = next(iter(m["units"]))
    m["units"][unit]["parts"] = 10 ** 7
    p.write_text(json.dumps(m))
    return {"unit": unit, "parts": 10 ** 7}


def _git(tree: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _group_rss_mb(pgid: int) -> float:
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # pgrp
                continue
            with open(f"/proc/{d}/statm") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_child(args: argparse.Namespace, name: str, work: Path, tag: str, arg: str | None,
              limit: float) -> dict:
    """One fresh child process: exit, wall time, peak RSS (wait4), its result file."""
    result = work / f"result_{tag}.json"
    result.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(args.tree) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env[ENV_MARKER] = ENV_MARKER
    env.pop("VLMPREP_PROGRESS", None)
    cmd = [args.python, str(Path(__file__).resolve()), "--child", name, "--work", str(work),
           "--result", str(result)] + (["--arg", arg] if arg is not None else [])
    out_f = open(work / f"stdout_{tag}.txt", "wb")
    err_f = open(work / f"stderr_{tag}.txt", "wb")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=work, env=env, stdout=out_f, stderr=err_f,
                         start_new_session=True)
    killed = None
    group_peak = 0.0
    last_sample = 0.0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        now = time.perf_counter()
        if now - last_sample >= 0.1:
            last_sample = now
            g = _group_rss_mb(p.pid)
            group_peak = max(group_peak, g)
            if killed is None and g > args.mem_cap_mb:
                killed = f"killed at memory cap ({args.mem_cap_mb} MB)"
            elif killed is None and now - t0 > limit:
                killed = f"killed at limit ({limit:g} s)"
            if killed:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    try:  # reap what the group left (job workers): they die with the killed group
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    out_f.close()
    err_f.close()
    if os.WIFSIGNALED(status):
        exit_s = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        exit_s = f"exit {os.WEXITSTATUS(status)}"
    res = {}
    if result.exists():
        try:
            res = json.loads(result.read_text())
        except ValueError:
            res = {}
    stderr = (work / f"stderr_{tag}.txt").read_text(errors="replace")
    fatal = "Fatal Python error" in stderr or "Segmentation fault" in stderr
    return {"exit": killed or exit_s, "killed": killed, "wall_s": round(wall, 2),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "group_rss_peak_mb": round(group_peak, 1),
            "parent_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "base_rss_mb": res.get("base_rss_mb"), "result": res, "fatal_error_in_stderr": fatal,
            "stderr_tail": stderr[-1500:]}


def build_in_child(args: argparse.Namespace, rid: str, work: Path) -> dict:
    """Build a repro's inputs in a process of its own: a child's ``ru_maxrss`` starts from the
    peak of the process it was forked from (the kernel carries the old memory's high-water mark
    through fork and exec), so this process must stay small (repro 7 builds 300 MB)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([args.python, str(Path(__file__).resolve()), "--build", rid, "--work",
                        str(work)], env=env, cwd=work, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building the inputs of repro {rid} failed:\n{r.stderr[-3000:]}")
    return json.loads((work / "inputs.json").read_text())


def build_main(rid: str, work: str) -> int:
    spec = next(r for r in REPROS if r["id"] == rid)
    info = spec["build"](Path(work))
    (Path(work) / "inputs.json").write_text(json.dumps(info), encoding="utf-8")
    return 0


def _burners(n: int) -> list[subprocess.Popen]:
    code = "import time\nt=time.time()\nwhile time.time()-t<900:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def _static(tree: Path, what: str) -> dict:
    if what == "set_rows":
        doc = tree / "docs" / "how-to" / "batch.md"
        text = doc.read_text(encoding="utf-8") if doc.exists() else ""
        n = sum(1 for line in text.splitlines() if line.startswith("| `--set"))
        return {"outcome": f"{n} row(s) of `--set` in the flag table", "rows": n}
    raise ValueError(what)


def run_repro(args: argparse.Namespace, spec: dict, root: Path) -> dict:
    row = {"id": spec["id"], "title": spec["title"], "scale": spec.get("scale", "as in the issue"),
           "load_before": _load()}
    if "static" in spec:
        row.update(_static(args.tree, spec["static"]), exit="-", wall_s=None, peak_rss_mb=None)
        return row
    work = root / f"r{spec['id']}"
    work.mkdir()
    t0 = time.perf_counter()
    if spec.get("build"):
        row["inputs"] = build_in_child(args, spec["id"], work)
    row["build_s"] = round(time.perf_counter() - t0, 2)
    if spec.get("setup"):
        s = run_child(args, spec["setup"], work, "setup", None, args.limit)
        row["setup"] = {k: s[k] for k in ("exit", "wall_s", "peak_rss_mb")} | {
            "outcome": s["result"].get("outcome")}
        row["tamper"] = spec["tamper"](work)
    runs = spec.get("runs", 1) if spec["child"] != "quickstart" else args.quickstart_runs
    burners = _burners(args.burners) if spec["child"] == "quickstart" and args.burners else []
    results = []
    try:
        for k in range(runs):
            results.append(run_child(args, spec["child"], work, f"run{k}", spec.get("arg"),
                                     args.limit))
    finally:
        for b in burners:
            b.kill()
            b.wait()
    if burners:
        row["load"] = f"{args.burners} CPU burner process(es) during the runs"
    if runs == 1:
        r = results[0]
        res = r.pop("result")
        row.update(r)
        row["outcome"] = (f"did not finish ({r['killed']})" if r["killed"] else
                          res.get("outcome") or "no result (the child died before writing it)")
        row["detail"] = {k: v for k, v in res.items() if k != "outcome"}
        if spec.get("stderr_check"):
            hit = bool(re.search(spec["stderr_check"], r["stderr_tail"]))
            row["outcome"] += f"; stderr matches {spec['stderr_check']!r}: {hit}"
            row["stderr_match"] = hit
    else:
        crashes = [r for r in results if r["exit"].startswith("signal") or r["fatal_error_in_stderr"]
                   or (r["exit"] != "exit 0" and not r["killed"])]
        killed = [r for r in results if r["killed"]]
        ok = [r for r in results if r["result"].get("outcome", "").startswith("ok")]
        row.update(
            outcome=(f"{len(crashes)} crash(es) in {runs} runs ("
                     + (", ".join(r["exit"] for r in crashes) or "none") + f"); {len(ok)} ok"
                     + (f"; {len(killed)} killed at limit" if killed else "")),
            exit=", ".join(sorted({r["exit"] for r in results})),
            wall_s=round(max(r["wall_s"] for r in results), 2),
            wall_s_each=[r["wall_s"] for r in results],
            peak_rss_mb=max(r["peak_rss_mb"] for r in results),
            base_rss_mb=max((r["base_rss_mb"] or 0) for r in results),
            runs=[{k: v for k, v in r.items() if k not in ("result",)}
                  | {"outcome": r["result"].get("outcome")} for r in results])
        row["vlmprep_file"] = results[0]["result"].get("vlmprep_file")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def _cell(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def table(doc: dict) -> str:
    lines = [f"issue 33 repros, tag `{doc['tag']}`: tree {doc['tree']} at {doc['commit'][:10]}"
             f"{' (dirty)' if doc.get('dirty') else ''}, limit {doc['limit_s']:g} s per run, "
             f"{doc['host']['cpus']} CPUs; load average at start {doc['load_start']}, "
             f"at end {doc.get('load_end')}", "",
             "| # | repro | scale | outcome | exit | wall s | peak RSS MB (base) |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        peak = r.get("peak_rss_mb")
        base = r.get("base_rss_mb")
        mem = "-" if peak is None else f"{peak:,.0f}" + (f" ({base:,.0f})" if base else "")
        wall = "-" if r.get("wall_s") is None else f"{r['wall_s']:.1f}"
        lines.append(f"| {r['id']} | {_cell(r['title'])} | {_cell(r['scale'])} | "
                     f"{_cell(r.get('outcome', ''))} | {_cell(r.get('exit', ''))} | {wall} | {mem} |")
    return "\n".join(lines)


def parent_main(args: argparse.Namespace) -> int:
    args.tree = Path(args.tree).resolve()
    if not (args.tree / "vlmprep" / "__init__.py").exists():
        print(f"--tree: expected a vlmprep source tree, got {args.tree} without "
              f"vlmprep/__init__.py", file=sys.stderr)
        return 2
    chosen = REPROS
    if args.only:
        want = [x.strip() for x in args.only.split(",") if x.strip()]
        chosen = [r for r in REPROS if r["id"] in want or r["id"].rstrip("abcd") in want]
        if not chosen:
            print(f"--only: expected ids from {[r['id'] for r in REPROS]}, got {args.only!r}",
                  file=sys.stderr)
            return 2
    out = Path(args.out) if args.out else RESULTS / f"issue33_{args.tag}.json"
    doc = {"tag": args.tag, "tree": str(args.tree), "commit": _git(args.tree, "rev-parse", "HEAD"),
           "dirty": bool(_git(args.tree, "status", "--porcelain", "--untracked-files=no")),
           "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "python": args.python, "limit_s": args.limit, "mem_cap_mb": args.mem_cap_mb,
           "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                    "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                    / 2**30, 1)},
           "load_start": _load(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": []}
    root = Path(tempfile.mkdtemp(prefix="i33_", dir=args.tmp))
    try:
        for spec in chosen:
            print(f"[{time.strftime('%H:%M:%S')}] {spec['id']}: {spec['title']} "
                  f"(load {_load()[0]})", file=sys.stderr, flush=True)
            row = run_repro(args, spec, root)
            doc["rows"].append(row)
            print(f"    -> {row.get('exit')}, {row.get('wall_s')} s, {row.get('peak_rss_mb')} MB: "
                  f"{row.get('outcome')}", file=sys.stderr, flush=True)
            doc["load_end"] = _load()
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"inputs and child outputs kept in {root}", file=sys.stderr)
    files = {r.get("vlmprep_file") or (r.get("detail") or {}).get("vlmprep_file")
             for r in doc["rows"]} - {None}
    stray = [f for f in files if not str(f).startswith(str(args.tree))]
    if stray:
        print(f"warning: a child imported vlmprep from outside --tree: {stray}", file=sys.stderr)
    print(table(doc))
    print(f"\n(wrote {out})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", default=str(HERE.parent),
                   help="the vlmprep source tree to measure (PYTHONPATH of the children)")
    p.add_argument("--tag", default="run", help="results file: bench/results/issue33_<tag>.json")
    p.add_argument("--out", default=None, help="results file (default from --tag)")
    p.add_argument("--only", default=None, help="comma-separated repro ids (1 = 1a,1b,1c)")
    p.add_argument("--limit", type=float, default=120.0, help="seconds per child run (default 120)")
    p.add_argument("--mem-cap-mb", type=float, default=9000.0,
                   help="kill a child whose process group's RSS passes this (default 9000)")
    p.add_argument("--quickstart-runs", type=int, default=8, help="repro 9's fresh runs (8)")
    p.add_argument("--burners", type=int, default=2, help="CPU burner processes for repro 9 (2)")
    p.add_argument("--python", default=sys.executable, help="the children's interpreter")
    p.add_argument("--tmp", default=None, help="folder for the temp inputs (default: $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the inputs and the children's output")
    p.add_argument("--table", default=None, metavar="JSON", help="print the table of a saved run")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--arg", default=None, help=argparse.SUPPRESS)
    p.add_argument("--build", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build:
        return build_main(args.build, args.work)
    if args.child:
        return child_main(args.child, args.work, args.result, args.arg)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
