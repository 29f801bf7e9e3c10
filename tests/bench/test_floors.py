"""`vlmprep bench`'s floors (issue 20 item 3): the output-write floor stores exactly each image's
output bytes (its pixel_values: dtype and row form), the exact-resize floor builds the plan's
canvases, the lower bound is the sum of the three floors and every ratio is its quotient; the
--row-form and --format flags. Values are checked against the Processor's own outputs and plans;
speed is never asserted (tiny inputs, one timed pass)."""
from __future__ import annotations

import json

import pytest

from vlmprep import Processor, kernels
from vlmprep.bench import harness as bench_harness
from vlmprep.bench import images as bench_images
from vlmprep.cli.main import main

pytestmark = pytest.mark.skipif(not kernels.available(), reason="compiled kernels not built")

FAST = ["--num-images", "2", "--repeat", "1", "--warmup", "0", "--threads", "1", "--quiet"]


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(["bench", *args])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _output_bytes(preset: str, items, dtype: str, row_form: str) -> float:
    proc = Processor(preset, backend="torch", dtype=dtype, row_form=row_form)
    sizes = []
    for item in items:
        pv = proc([item]).pixel_values
        sizes.append(pv.numel() * pv.element_size())
    return sum(sizes) / len(sizes)


def test_floors_rows_and_ratios(capsys):
    rc, out, err = _run(["--synthetic", "96x64", "--format", "jpeg,png", "--dtype",
                         "float32,uint8", "--row-form", "full,compact", *FAST, "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert [i["label"] for i in d["inputs"]] == ["96x64", "96x64-png"]
    assert [i["formats"] for i in d["inputs"]] == [["jpeg"], ["png"]]
    assert d["config"]["row_forms"] == ["full", "compact"]
    sets = {s: bench_images.synthetic_set("96x64", 2, fmt=f)
            for s, f in (("96x64", "jpeg"), ("96x64-png", "png"))}
    # the write floor stores exactly the Processor's output bytes; compact is 1/T of full
    writes = {(w["size"], w["dtype"], w["row_form"]): w for w in d["write_floor"]}
    assert len(writes) == 2 * 2 * 2
    for (size, dtype, form), w in writes.items():
        assert w["write_floor_bytes"] == round(_output_bytes("qwen2-vl", sets[size].items, dtype, form))
        assert w["write_floor_ms"] > 0 and w["write_floor_min_ms"] <= w["write_floor_ms"]
        full = writes[size, dtype, "full"]["write_floor_bytes"]
        assert w["write_floor_bytes"] * (2 if form == "compact" else 1) == full
    assert {r["resize"] for r in d["resize_floor"]} == {"kernels.resize"}
    decode = {f["size"]: f for f in d["decode_floor"]}
    resize = {f["size"]: f for f in d["resize_floor"]}
    assert len(d["results"]) == 2 * 2 * 2
    for r in d["results"]:
        w = writes[r["size"], r["dtype"], r["row_form"]]
        assert r["write_floor_ms"] == w["write_floor_ms"]
        assert r["resize_floor_ms"] == resize[r["size"]]["resize_floor_ms"]
        assert r["decode_floor_ms"] == decode[r["size"]]["decode_floor_ms"]
        bound = r["decode_floor_ms"] + r["write_floor_ms"] + r["resize_floor_ms"]
        assert r["lower_bound_ms"] == pytest.approx(bound, abs=1e-3)
        assert r["ratio_vs_lower_bound"] == pytest.approx(r["per_image_p50_ms"] / bound, rel=1e-2)
        m = r["min_based"]
        low = (decode[r["size"]]["decode_floor_min_ms"] + w["write_floor_min_ms"]
               + resize[r["size"]]["resize_floor_min_ms"])
        assert m["lower_bound_min_ms"] == pytest.approx(low, abs=1e-3)
        assert m["ratio_vs_lower_bound"] == pytest.approx(r["per_image_min_ms"] / low, rel=1e-2)
        assert r["per_image_min_ms"] <= r["per_image_p50_ms"]
        assert r["stages_error"] is None  # compact rows through their execution pipeline
    for key in ("write_floor_ms", "resize_floor_ms", "lower_bound_ms", "ratio_vs_lower_bound",
                "row_form", "min_based"):
        assert key in d["definitions"]


def test_tiles_family_floors(capsys):
    """InternVL: the resize floor builds both canvases (tiles and thumbnail) of the plan."""
    rc, out, err = _run(["--preset", "internvl", "--synthetic", "96x64", *FAST, "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    (w,) = d["write_floor"]
    items = bench_images.synthetic_set("96x64", 2).items
    assert w["write_floor_bytes"] == round(_output_bytes("internvl", items, "float32", "full"))
    assert d["results"][0]["ratio_vs_lower_bound"] > 0


def test_no_lower_bound_and_text_report(capsys):
    rc, out, err = _run(["--synthetic", "64x48", *FAST, "--no-lower-bound", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["write_floor"] == [] and d["resize_floor"] == []
    assert "ratio_vs_lower_bound" not in d["results"][0] and "ratio_vs_decode_floor" in d["results"][0]
    rc, out, err = _run(["--synthetic", "64x48", *FAST], capsys)
    assert rc == 0, err
    for words in ("floors, one thread", "x lower bound", "x decode floor", "lower bound"):
        assert words in out


@pytest.mark.parametrize("args, words", [
    (["--row-form", "half"], "expected row forms from full, compact"),
    (["--preset", "internvl", "--row-form", "compact"], "--row-form compact: row_form='compact'"),
    (["--format", "gif"], "expected formats from jpeg, png, webp"),
    (["--images", ".", "--format", "png"], "--format: expected --synthetic"),
])
def test_bad_flags(args, words, capsys):
    inputs = [] if "--images" in args else ["--synthetic", "64x48"]
    rc, out, err = _run([*inputs, *args], capsys)
    assert rc == 2 and words in err, err


def test_row_forms_match_pack():
    from vlmprep import pack
    assert bench_harness.ROW_FORMS == pack.ROW_FORMS
