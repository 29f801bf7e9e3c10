"""Fixtures for the batch layer (issue 18): small inputs in every source format, built from real
package photos (skimage.data, matplotlib's Grace Hopper), with bad items mixed in.

Each fixture returns a ``Built``: the input path, every expected sample id in reader order, the
encoded bytes the reader must return for each id that has bytes, and which ids are bad (they end
as status "error" after processing). ``unreadable`` is the subset the *reader* already reports
(``Sample.data is None``: a tar group without an image, a parquet null, a missing listed path);
the other bad items (truncated JPEG, text named .jpg, zero-byte file) come back as bytes and fail
at decode. Ids and order follow the rules of vlmprep/batch/sources/ (its package docstring).

Fixtures: ``photos`` (list of (name, ext, bytes), ~200-320 px), ``image_folder``, ``wds_tar``,
``parquet_plain``, ``parquet_hf`` (skip when pyarrow is missing), ``path_list``; ``builders``
(the make_* functions, for tests that need several inputs, e.g. two tar shards; this conftest is
not importable). Randomness (photo crops) comes from the ``seed`` fixture.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _support.imgdata import photo
from PIL import Image

PHOTO_NAMES = ("astronaut", "coffee", "chelsea", "rocket", "hopper")
# (extension, PIL format, save options): the formats a batch input usually holds.
_ENCODINGS = (("jpg", "JPEG", {"quality": 90}), ("png", "PNG", {}), ("webp", "WEBP", {"quality": 85}),
              ("jpeg", "JPEG", {"quality": 85}), ("jpg", "JPEG", {"quality": 80}))
TEXT_AS_JPG = b"this is a text file, not a JPEG\n"


@dataclass(frozen=True)
class Built:
    path: Path                                        # the input to pass to discover()
    ids: list[str]                                    # every sample id, in reader order
    data: dict[str, bytes]                            # id -> bytes the reader returns (data not None)
    bad: dict[str, str] = field(default_factory=dict)  # id -> what is wrong (ends as status "error")
    unreadable: frozenset[str] = frozenset()          # ids whose Sample.data is None (reader error)

    @property
    def good(self) -> list[str]:
        """Ids that process fine, in reader order."""
        return [i for i in self.ids if i not in self.bad]


def make_photos(seed: int, n: int = 5) -> list[tuple[str, str, bytes]]:
    """``n`` small encoded photos (name, extension, bytes): a random crop of each package photo,
    downscaled so the long side is 200-320 px, encoded as JPEG / PNG / WebP in turn."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        name = PHOTO_NAMES[i % len(PHOTO_NAMES)]
        a = photo(name)
        h, w = a.shape[:2]
        ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        img = Image.fromarray(np.ascontiguousarray(a[top:top + ch, left:left + cw]))
        side = int(rng.integers(200, 321))
        s = side / max(ch, cw)
        img = img.resize((max(1, round(cw * s)), max(1, round(ch * s))), Image.Resampling.BILINEAR)
        ext, fmt, opts = _ENCODINGS[i % len(_ENCODINGS)]
        buf = io.BytesIO()
        img.save(buf, fmt, **opts)
        out.append((f"{name}{i}", ext, buf.getvalue()))
    return out


def truncated(jpeg: bytes) -> bytes:
    """The first 40% of an encoded JPEG (header intact, no end of image)."""
    return jpeg[: max(200, len(jpeg) * 2 // 5)]


def _jpeg_of(photos) -> bytes:
    return next(b for _, ext, b in photos if ext == "jpg")


def make_folder(root: Path, photos) -> Built:
    """A nested tree: images at several depths, a truncated JPEG, a text file named .jpg, a
    zero-byte .png, plus files the default glob skips (notes.txt, meta.json)."""
    rels = ["top.jpg" if photos[0][1] == "jpg" else f"top.{photos[0][1]}"]
    rels += [f"a/{n}.{e}" for n, e, _ in photos[1:3]] + [f"a/b/c/{n}.{e}" for n, e, _ in photos[3:]]
    data = {rel: b for rel, (_, _, b) in zip(rels, photos)}
    bad = {"bad/truncated.jpg": "truncated JPEG", "bad/text.jpg": "text file named .jpg",
           "bad/empty.png": "zero-byte file"}
    data.update({"bad/truncated.jpg": truncated(_jpeg_of(photos)), "bad/text.jpg": TEXT_AS_JPG,
                 "bad/empty.png": b""})
    for rel, b in data.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b)
    (root / "notes.txt").write_text("not an image\n")
    (root / "a" / "meta.json").write_text("{}\n")
    return Built(root, sorted(data), data, bad)


def make_tar(path: Path, photos, start: int = 1) -> Built:
    """A WebDataset shard: keys ``{n:06d}`` from ``start``, members ``KEY.<ext>`` + ``KEY.json``
    (+ ``KEY.txt``); bad groups: truncated JPEG, text as .jpg, zero-byte .png, a group with only
    a .json (no image member)."""
    groups: list[tuple[str, dict[str, bytes]]] = []
    data, bad = {}, {}
    k = start
    for name, ext, b in photos:
        key = f"{k:06d}"
        groups.append((key, {ext: b, "json": json.dumps({"name": name}).encode(), "txt": name.encode()}))
        data[key] = b
        k += 1
    for what, ext, b in (("truncated JPEG", "jpg", truncated(_jpeg_of(photos))),
                         ("text file named .jpg", "jpg", TEXT_AS_JPG), ("zero-byte file", "png", b"")):
        key = f"{k:06d}"
        groups.append((key, {"json": b"{}", ext: b}))  # image member after the json: order-free
        data[key], bad[key] = b, what
        k += 1
    nokey = f"{k:06d}"
    groups.append((nokey, {"json": b'{"caption": "no image"}'}))
    bad[nokey] = "no image member in group"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for key, members in groups:
            for ext, b in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size, ti.mtime, ti.mode = len(b), 0, 0o644
                tf.addfile(ti, io.BytesIO(b))
    ids = [key for key, _ in groups]
    return Built(path, ids, data, bad, frozenset({nokey}))


def _parquet_rows(photos):
    """(id, bytes or None, what-is-wrong or None) rows: photos, then the bad ones."""
    rows = [(f"img-{i:03d}", b, None) for i, (_, _, b) in enumerate(photos)]
    n = len(rows)
    rows += [(f"img-{n:03d}", truncated(_jpeg_of(photos)), "truncated JPEG"),
             (f"img-{n + 1:03d}", TEXT_AS_JPG, "text bytes, not an image"),
             (f"img-{n + 2:03d}", None, "null image bytes"),
             (f"img-{n + 3:03d}", b"", "zero-length bytes")]
    return rows


def make_parquet_plain(path: Path, photos, row_group_size: int = 3) -> Built:
    """Parquet with ``id`` (string), ``image`` (binary) and ``caption`` columns, several row
    groups; one row has null bytes. ``ids`` are the ``id`` column's values (pass
    id_column="id"); without id_column the reader's ids are ``row-{n}`` (n = row index)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = _parquet_rows(photos)
    t = pa.table({"id": pa.array([r[0] for r in rows], pa.string()),
                  "image": pa.array([r[1] for r in rows], pa.binary()),
                  "caption": pa.array([f"caption {i}" for i in range(len(rows))], pa.string())})
    pq.write_table(t, path, row_group_size=row_group_size)
    return Built(path, [r[0] for r in rows], {r[0]: r[1] for r in rows if r[1] is not None},
                 {r[0]: r[2] for r in rows if r[2]}, frozenset(r[0] for r in rows if r[1] is None))


def make_parquet_hf(path: Path, photos, row_group_size: int = 4) -> Built:
    """Parquet in the Hugging Face datasets form: ``image`` struct<bytes: binary, path: string>
    and ``label`` (int64); no id column (ids ``row-{n}``). One row has bytes null and a ``path``
    relative to the parquet file (the reader falls back to it), one has both null, one names a
    missing file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    side = path.parent / "hf_files"
    side.mkdir(exist_ok=True)
    rows = _parquet_rows(photos)
    images: list[dict | None] = []
    data, bad, unreadable = {}, {}, set()
    for n, (_, b, what) in enumerate(rows):
        rid = f"row-{n}"
        if b is None:
            images.append({"bytes": None, "path": None})
            unreadable.add(rid)
        else:
            images.append({"bytes": b, "path": f"orig_{n}.jpg"})
            data[rid] = b
        if what:
            bad[rid] = what
    n = len(rows)
    fb = photos[0][2]
    (side / "fallback.bin").write_bytes(fb)
    images.append({"bytes": None, "path": "hf_files/fallback.bin"})
    data[f"row-{n}"] = fb
    images.append({"bytes": None, "path": "hf_files/missing.jpg"})
    bad[f"row-{n + 1}"] = "missing file named by path"
    unreadable.add(f"row-{n + 1}")
    images.append(None)
    bad[f"row-{n + 2}"] = "null struct"
    unreadable.add(f"row-{n + 2}")
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    t = pa.table({"image": pa.array(images, struct),
                  "label": pa.array(list(range(len(images))), pa.int64())})
    pq.write_table(t, path, row_group_size=row_group_size)
    ids = [f"row-{i}" for i in range(len(images))]
    return Built(path, ids, data, bad, frozenset(unreadable))


def make_list(path: Path, folder: Built) -> Built:
    """A text list of paths relative to the list's folder (lines from ``folder``'s tree, in a
    shuffled-looking fixed order), a blank line, a comment, and a path that does not exist."""
    rel = os.path.relpath(folder.path, path.parent)
    lines = [f"{rel}/{r}" for r in reversed(folder.ids)]
    missing = f"{rel}/no/such/file.jpg"
    lines.insert(2, missing)
    text = "# images for the batch test\n" + "\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n"
    path.write_text(text)
    data = {f"{rel}/{r}": b for r, b in folder.data.items()}
    bad = {f"{rel}/{r}": w for r, w in folder.bad.items()}
    bad[missing] = "missing file"
    return Built(path, lines, data, bad, frozenset({missing}))


@pytest.fixture(scope="session")
def photos(seed) -> list[tuple[str, str, bytes]]:
    """Five small encoded package photos: (name, extension, bytes)."""
    return make_photos(seed)


@pytest.fixture
def image_folder(tmp_path, photos) -> Built:
    return make_folder(tmp_path / "photos", photos)


@pytest.fixture
def wds_tar(tmp_path, photos) -> Built:
    return make_tar(tmp_path / "shard-000000.tar", photos)


@pytest.fixture
def parquet_plain(tmp_path, photos) -> Built:
    pytest.importorskip("pyarrow", reason="parquet inputs need pyarrow (pip install vlmprep[parquet])")
    return make_parquet_plain(tmp_path / "plain.parquet", photos)


@pytest.fixture
def parquet_hf(tmp_path, photos) -> Built:
    pytest.importorskip("pyarrow", reason="parquet inputs need pyarrow (pip install vlmprep[parquet])")
    return make_parquet_hf(tmp_path / "hf.parquet", photos)


@pytest.fixture
def path_list(tmp_path, photos) -> Built:
    folder = make_folder(tmp_path / "listed", photos)
    return make_list(tmp_path / "paths.txt", folder)



@pytest.fixture(scope="session")
def builders():
    """The builder functions, for tests that need several inputs (conftest is not importable):
    ``builders.tar(tmp_path / "b.tar", photos, start=100)``."""
    return SimpleNamespace(folder=make_folder, tar=make_tar, parquet_plain=make_parquet_plain,
                           parquet_hf=make_parquet_hf, list=make_list, photos=make_photos,
                           truncated=truncated)
