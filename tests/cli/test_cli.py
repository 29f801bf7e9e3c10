"""The command line: `vlmprep plan` and `vlmprep info`, table and --json."""
from __future__ import annotations

import json
import subprocess
import sys

from _support import figures
from _support.imgdata import crop, encode, with_exif_orientation


def _run(*args):
    r = subprocess.run([sys.executable, "-m", "vlmprep.cli.main", *args], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_plan_sizes_table_and_json():
    rc, out, _ = _run("plan", "--preset", "qwen2-vl", "--size", "1920x1080")
    assert rc == 0
    line = [s for s in out.splitlines() if s.startswith("1920x1080")][0].split()
    # Qwen2-VL (transformers' processor, checkpoint config): 1080x1920 (HxW) -> 1092x1932,
    # grid (1, 78, 138), 2691 tokens.
    assert line[2] == "1932x1092" and line[-2] == "2691"
    rc, out, _ = _run("plan", "--preset", "qwen3-vl", "--size", "1920x1080", "--json")
    d = json.loads(out)
    img = d["images"][0]
    assert (img["resized"], img["grid_thw"], img["tokens"]) == ("1920x1088", [[1, 68, 120]], 2040)
    rc, out, _ = _run("plan", "--size", "1920x1080", "--set", "max_pixels=1003520", "--json")
    assert json.loads(out)["images"][0]["tokens"] == 1222
    # A tiling family: InternVL 1080x1920 -> 4x2 tiles + thumbnail, 2306 tokens (as transformers).
    rc, out, _ = _run("plan", "--preset", "internvl", "--size", "1920x1080", "--json")
    img = json.loads(out)["images"][0]
    assert (img["tiles"], img["tokens"], img["resized"]) == (9, 2306, "1792x896")


def test_plan_files_reads_headers(tmp_path):
    a = tmp_path / "a.jpg"
    a.write_bytes(with_exif_orientation(crop("chelsea", 300, 451), 6))
    b = tmp_path / "b.png"
    b.write_bytes(encode(crop("coffee", 333, 400), "png"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff")
    rc, out, _ = _run("plan", "--json", str(a), str(b), str(bad))
    rows = json.loads(out)["images"]
    assert rows[0]["source"] == "300x451"  # W x H after orientation 6
    assert rows[1]["format"] == "png" and rows[1]["error"] is None
    assert rows[2]["tokens"] == 0 and "expected" in rows[2]["error"]
    assert rc == 1  # one bad file


def test_plan_usage_errors():
    rc, _, err = _run("plan", "--size", "big")
    assert rc == 2 and "WIDTHxHEIGHT" in err
    rc, _, err = _run("plan", "--preset", "nope", "--size", "10x10")
    assert rc == 2 and "unknown preset" in err


def test_info():
    rc, out, _ = _run("info", "--json")
    d = json.loads(out)
    assert rc == 0 and d["backends"]["reference"]["available"]
    assert d["versions"]["torch"] and "qwen2-vl" in d["presets"]
    rc, out, _ = _run("info")
    assert "backends:" in out and "reference" in out


def test_import_is_light():
    code = ("import sys, time; t = time.perf_counter(); import vlmprep; "
            "vlmprep.presets.get('qwen2-vl'); dt = time.perf_counter() - t; "
            "print(dt, sorted(m for m in ('torch', 'numpy', 'PIL', 'nvidia.dali') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    dt, mods = out.split(" ", 1)
    assert mods.strip() == "[]"  # neither torch, numpy, PIL nor DALI imported
    figures.record("cli: import cost", f"import vlmprep + presets.get: {float(dt) * 1000:.1f} ms")
