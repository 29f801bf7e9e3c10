"""``vlmprep run`` over PDFs (issue 31 step 2): a PDF sample is one image row per page, id
``{id}#p{k}`` (0-based, as ``Document(pages=)``), read back bit-exact through read_shards as
``proc(documents=[Document(file, pages=[k])])``; a damaged PDF is one error row naming it, a bad
page that page's error row. PDFs: tests/_support/pdfs.py (pypdfium2's own API)."""
from __future__ import annotations

import io
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from _support.imgdata import encode, tiled

import vlmprep
from vlmprep import Document
from vlmprep.batch.config import JobConfig
from vlmprep.batch.rows import process_samples
from vlmprep.batch.run import run
from vlmprep.batch.sources import Sample

pdfs = pytest.importorskip("_support.pdfs", reason="needs pypdfium2 (pip install 'vlmprep[pdf]')")


@pytest.fixture(scope="module")
def pdf3() -> bytes:
    return pdfs.make_pdf([(100.3, 80.7), (60, 110), (90, 50)], rotate={2: 90}, seed=5)


def _same(got, want) -> None:
    assert torch.equal(got.pixel_values, want.pixel_values)
    assert got.pixel_values.dtype == want.pixel_values.dtype
    assert torch.equal(got.cu_seqlens, want.cu_seqlens) and torch.equal(got.grid_thw, want.grid_thw)
    assert got.num_tokens == want.num_tokens and got.placeholders == want.placeholders
    assert [p.source_hw for p in got.image_plans] == [p.source_hw for p in want.image_plans]


def _read(out) -> dict:
    return dict(vlmprep.read_shards(out, include_errors=True))


@pytest.mark.parametrize("fmt", ["parquet", "safetensors"])
def test_folder_pdf_pages_read_back_as_the_processor(tmp_path, pdf3, fmt):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.pdf").write_bytes(pdf3)
    (root / "broken.pdf").write_bytes(pdf3[: len(pdf3) // 3])
    still = encode(tiled("coffee", 60, 70), "png")
    (root / "still.png").write_bytes(still)
    out = tmp_path / "out"
    # shard_size counts samples: the 3 pages of a.pdf share one shard with broken.pdf
    s = run([str(root)], str(out), JobConfig(preset="qwen2-vl", format=fmt, shard_size=2))
    assert (s["images"], s["processed"], s["skipped"], s["complete"]) == (5, 4, 1, True)
    got = _read(out)
    assert list(got) == ["a.pdf#p0", "a.pdf#p1", "a.pdf#p2", "broken.pdf", "still.png"]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    for k in range(3):
        _same(got[f"a.pdf#p{k}"], proc(documents=[Document(str(root / "a.pdf"), pages=[k])]))
    _same(got["still.png"], proc([still]))
    err = got["broken.pdf"].errors[0]
    assert "damaged or truncated" in err.reason and err.source == "docs/broken.pdf"


def test_tar_and_parquet_pdfs_routed_by_content(tmp_path, pdf3):
    tar = tmp_path / "d.tar"
    with tarfile.open(tar, "w") as t:
        for name, data in (("000.pdf", pdf3), ("001.jpg", encode(tiled("rocket", 40, 50), "jpeg"))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    pq.write_table(pa.table({"id": ["x", "y"], "image": [pdf3, b"\x89PNG not really"]}),
                   tmp_path / "d.parquet")
    for name, ids in (("d.tar", ["000#p0", "000#p1", "000#p2", "001"]),
                      ("d.parquet", ["row-0#p0", "row-0#p1", "row-0#p2", "row-1"])):
        out = tmp_path / f"out-{name}"
        run([str(tmp_path / name)], str(out), JobConfig(preset="internvl", format="safetensors"))
        got = _read(out)
        assert list(got) == ids
        proc = vlmprep.Processor("internvl", errors="skip")
        _same(got[ids[1]], proc(documents=[Document(pdf3, pages=[1])]))


def test_page_error_is_its_row_error(pdf3):
    # the middle page is 60 x 110 pt: 120 x 220 px at 144 dpi, over a 20,000-pixel budget
    proc = vlmprep.Processor("qwen2-vl", max_source_pixels=20_000)
    rows = process_samples(proc, [Sample("a.pdf", "in/a.pdf", pdf3), Sample("n", "n", b"%PDF-1.4 junk")])
    assert [r["id"] for r in rows] == ["a.pdf#p0", "a.pdf#p1", "a.pdf#p2", "n"]
    assert [r["status"] for r in rows] == ["error", "error", "ok", "error"]
    assert "max_source_pixels" in rows[1]["error"] and rows[1]["orig_hw"] == [220, 120]
    assert rows[3]["id"] == "n" and "damaged" in rows[3]["error"]


def test_run_document_options_pages_dpi_and_budget(tmp_path, pdf3, capsys):
    """``vlmprep run --pages 2,0 --dpi 100``: rows for pages 2 and 0 only, in that order, each
    the Processor's at that dpi; ``--max-tokens`` keeps the leading pages the plan keeps (the
    rest have no row) and the config round-trips through the manifest (``--resume``)."""
    from vlmprep.cli.main import main
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.pdf").write_bytes(pdf3)
    out = tmp_path / "out"
    assert main(["run", "--preset", "qwen2-vl", "--input", str(root), "--output", str(out),
                 "--pages", "2,0", "--dpi", "100", "--no-progress"]) == 0
    got = _read(out)
    assert list(got) == ["a.pdf#p2", "a.pdf#p0"]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    for k in (2, 0):
        _same(got[f"a.pdf#p{k}"], proc(documents=[Document(str(root / "a.pdf"), pages=[k], dpi=100)]))
    assert main(["run", "--preset", "qwen2-vl", "--input", str(root), "--output", str(out),
                 "--pages", "2,0", "--dpi", "100", "--resume", "--no-progress"]) == 0
    # a budget of the first page's tokens at the 72-dpi floor: one page kept, at 72 dpi
    first = proc.plan(documents=[Document(pdf3, pages=[1], dpi=72)]).total_tokens
    cfg = JobConfig(preset="qwen2-vl", pages=(1, 2), max_tokens=first)
    plan = proc.plan(documents=[Document(pdf3, **cfg.document_options())])
    assert plan.documents[0].pages == [1] and plan.documents[0].dropped == [2]
    rows = process_samples(proc, [Sample("a.pdf", "a.pdf", pdf3)], document=cfg.document_options())
    assert [r["id"] for r in rows] == ["a.pdf#p1"] and rows[0]["num_tokens"] == first
    assert JobConfig.from_json(cfg.to_json()) == cfg and cfg.to_json()["pages"] == [1, 2]
    assert "dpi" not in JobConfig(preset="qwen2-vl").to_json()  # old configs keep their hash


@pytest.mark.parametrize("flag,value,match", [("--pages", "3-1", "0-based pages"),
                                              ("--pages", "x", "0-based pages"),
                                              ("--dpi", "0", "positive"),
                                              ("--max-tokens", "-5", "positive")])
def test_run_document_flags_are_checked(tmp_path, flag, value, match, capsys):
    from vlmprep.cli.main import main
    with pytest.raises(SystemExit) as e:
        main(["run", "--preset", "qwen2-vl", "--input", str(tmp_path), "--output",
              str(tmp_path / "o"), flag, value])
    assert e.value.code == 2 and match in capsys.readouterr().err
    with pytest.raises(ValueError, match="JobConfig: Document\\(dpi"):
        JobConfig(preset="qwen2-vl", dpi=99999.0)
