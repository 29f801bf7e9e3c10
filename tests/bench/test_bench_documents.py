"""`vlmprep bench --documents` (issue 31): the PDF it makes, the JSON it writes (every field
there and sane: pages counted = pages asked, peak RSS > 0), and that what it times for vlmprep
is the real path (its parts equal ``proc(documents=[...])``). Speed is never asserted: a
3-page PDF, one thread, one pass."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pypdfium2")
pytest.importorskip("transformers")

import torch  # noqa: E402

from vlmprep import Document, Processor  # noqa: E402
from vlmprep.bench import documents as bench_documents  # noqa: E402
from vlmprep.cli.main import main  # noqa: E402

PAGES = 3


def test_make_pdf_is_deterministic_letter_pages_with_text_and_figures():
    import pypdfium2 as pdfium
    data = bench_documents.make_pdf(PAGES, seed=0)
    assert bench_documents.make_pdf(PAGES, seed=0) == data
    # PDFium stamps the time of day (to the second) into the Info dictionary: a fixed one here,
    # or two calls a second apart differ (the CI met it)
    assert b"/CreationDate(D:20260101000000" in data
    assert bench_documents.make_pdf(PAGES, seed=1) != data
    pdf = pdfium.PdfDocument(data)
    assert len(pdf) == PAGES
    for k in range(PAGES):
        page = pdf[k]
        assert page.get_size() == pytest.approx((612.0, 792.0))
        assert len(page.get_textpage().get_text_range()) > 1000  # lines of text
        kinds = [o.type for o in page.get_objects()]
        assert kinds.count(pdfium.raw.FPDF_PAGEOBJ_IMAGE) == (2 if k % 2 else 1)  # the figures
    # page k does not depend on the page count: the 2x document starts with the 1x one's pages
    longer = pdfium.PdfDocument(bench_documents.make_pdf(PAGES + 1, seed=0))
    a = pdf[1].render(scale=0.5).to_numpy()
    b = longer[1].render(scale=0.5).to_numpy()
    assert (a == b).all()


def test_the_timed_vlmprep_path_equals_proc_documents(tmp_path):
    path = tmp_path / "paper.pdf"
    path.write_bytes(bench_documents.make_pdf(PAGES))
    proc = Processor("qwen2-vl")
    parts = list(bench_documents.vlmprep_parts(proc, str(path), 150.0, 2))
    assert [len(p.num_tokens) for p in parts] == [2, 1]
    whole = proc(documents=[Document(str(path), dpi=150.0)])
    assert torch.equal(torch.cat([p.pixel_values for p in parts]), whole.pixel_values)
    assert torch.equal(torch.cat([p.grid_thw for p in parts]), whole.grid_thw)
    # the render floor renders the same pixels vlmprep renders
    floor = list(bench_documents.render_floor_pages(str(path), 150.0))
    plan = proc.plan(documents=[Document(str(path), dpi=150.0)])
    assert len(floor) == PAGES and floor[0].shape[:2] == tuple(plan.images[0].source_hw)


@pytest.mark.slow  # ~40 s: every side in its own subprocess, each importing torch (make test-slow)
def test_bench_documents_json(tmp_path, capsys):
    out = tmp_path / "documents.json"
    rc = main(["bench", "--documents", "--pages", str(PAGES), "--threads", "1", "--warmup", "1",
               "--quiet", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "vlmprep bench --documents" in text and "target 5x" in text
    d = json.loads(out.read_text())
    assert d["tool"] == "vlmprep bench --documents"
    assert d["machine"]["cpu_model"] and len(d["load_average_before"]) == 3
    assert d["document"]["pages"] == PAGES and d["document"]["dpi"] == 150.0
    assert d["config"]["page_counts"] == [PAGES, 2 * PAGES]
    assert d["config"]["baseline_renderer"] in ("pymupdf", "pdf2image", "pypdfium2")
    backends = d["config"]["hf_backends"]
    assert backends and set(backends) <= {"pil", "torchvision"}
    sides = ["render_floor", "vlmprep", *[f"baseline_{b}" for b in backends]]
    assert [(r["pages"], r["threads"]) for r in d["results"]] == [(PAGES, 1), (2 * PAGES, 1)]
    tokens = d["document"]["tokens_per_page"]
    for r in d["results"]:
        for side in sides:
            m = r[side]
            assert m["pages"] == r["pages"], side  # pages counted = pages asked
            assert m["pages_per_s"] > 0 and m["seconds"] > 0
            assert m["peak_rss_mib"] > 0 and m["peak_rss_total_mib"] >= m["peak_rss_mib"]
            assert m["vlmprep_threads"] == 1 and m["torch_threads"] == 1
        assert r["vlmprep"]["rows"] == r["pages"] * tokens * 4  # qwen2-vl: 4 rows per token
        for b in backends:
            assert r[f"baseline_{b}"]["rows"] == r["vlmprep"]["rows"]
            assert r[f"same_grid_thw_{b}"] is True
            assert r[f"speedup_vs_{b}"] > 0 and r[f"speedup_bound_{b}"] > 0
        assert r["x_render_floor"] > 0
    mem = {(x["side"], x["threads"]): x for x in d["memory"]}
    assert set(mem) == {(s, 1) for s in sides}
    assert all("rss_growth_mib" in x for x in mem.values())
    t = d["target"]
    assert t["speedup"] == 5.0 and t["pages"] == PAGES and len(t["per_thread"]) == 1
    assert isinstance(t["met"], bool)


@pytest.mark.parametrize("args, msg", [
    (["--images", "."], "--images"),
    (["--video"], "--video"),
    (["--repeat", "2"], "--repeat"),
    (["--baseline-renderer", "nope"], "--baseline-renderer"),
])
def test_bench_documents_bad_flags(args, msg, capsys):
    try:
        rc = main(["bench", "--documents", "--quiet", *args])
    except SystemExit as e:
        rc = e.code
    assert rc != 0
    assert msg in capsys.readouterr().err
