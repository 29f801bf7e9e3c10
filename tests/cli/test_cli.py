"""The command line: `vlmprep plan` and `vlmprep info`, table and --json."""
from __future__ import annotations

import json
import re
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
    lines = out.splitlines()
    assert "source (WxH)" in lines[1] and "resized (WxH)" in lines[1]
    line = [s for s in lines if s.startswith("1920x1080")][0].split()
    # Qwen2-VL (transformers' processor, checkpoint config): 1080x1920 (HxW) -> 1092x1932,
    # grid (1, 78, 138), 2691 tokens. The table says WxH; no "None" in the error column.
    assert line[2] == "1932x1092" and line[-1] == "2691" and "None" not in out
    rc, out, _ = _run("plan", "--preset", "qwen3-vl", "--size", "1920x1080", "--json")
    d = json.loads(out)
    img = d["images"][0]
    # JSON: sizes as [height, width] under *_hw keys, as in Python.
    assert (img["source_hw"], img["resized_hw"], img["grid_thw"], img["tokens"]) == \
        ([1080, 1920], [1088, 1920], [[1, 68, 120]], 2040)
    rc, out, _ = _run("plan", "--size", "1920x1080", "--set", "max_pixels=1003520", "--json")
    assert json.loads(out)["images"][0]["tokens"] == 1222
    # A tiling family: InternVL 1080x1920 -> 4x2 tiles + thumbnail, 2306 tokens (as transformers).
    rc, out, _ = _run("plan", "--preset", "internvl", "--size", "1920x1080", "--json")
    img = json.loads(out)["images"][0]
    assert (img["tiles"], img["tokens"], img["resized_hw"]) == (9, 2306, [896, 1792])


def test_plan_files_reads_headers(tmp_path):
    a = tmp_path / "a.jpg"
    a.write_bytes(with_exif_orientation(crop("chelsea", 300, 451), 6))
    b = tmp_path / "b.png"
    b.write_bytes(encode(crop("coffee", 333, 400), "png"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff")
    rc, out, _ = _run("plan", "--json", str(a), str(b), str(bad))
    rows = json.loads(out)["images"]
    assert rows[0]["source_hw"] == [451, 300]  # [H, W] after orientation 6
    assert rows[1]["format"] == "png" and rows[1]["error"] is None
    assert rows[2]["tokens"] == 0 and "expected" in rows[2]["error"]
    assert rc == 1  # one bad file


def test_plan_usage_errors():
    rc, _, err = _run("plan", "--size", "big")
    assert rc == 2 and "WIDTHxHEIGHT" in err
    rc, _, err = _run("plan", "--preset", "nope", "--size", "10x10")
    assert rc == 2 and "unknown preset" in err and "Traceback" not in err
    # A typo in --set: exit 2, one line naming the valid fields and the near one; no traceback.
    rc, out, err = _run("plan", "--size", "1920x1080", "--set", "max_pixel=1003520")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert "'max_pixel'" in err and "did you mean 'max_pixels'" in err and "min_pixels" in err
    rc, _, err = _run("plan", "--size", "10x10", "--set", "max_pixels")
    assert rc == 2 and "FIELD=VALUE" in err and "Traceback" not in err
    rc, _, err = _run("plan", "--size", "10x10", "--set", "mean=a,b,c")
    assert rc == 2 and err.startswith("vlmprep plan: error: --set") and "Traceback" not in err


def test_plan_set_accepts_lists():
    rc, out, err = _run("plan", "--size", "64x64", "--set", "mean=0.5,0.5,0.5",
                        "--set", "std=[0.5, 0.5, 0.5]", "--json")
    assert rc == 0, err
    norm = [op for op in json.loads(out)["pipeline"]["ops"] if op["op"] == "normalize"][0]
    assert list(norm["mean"]) == [0.5, 0.5, 0.5] and list(norm["std"]) == [0.5, 0.5, 0.5]


def test_parse_value():
    from vlmprep.cli._common import parse_value
    assert parse_value("0.5,0.5,0.5") == (0.5, 0.5, 0.5)
    assert parse_value("[1, 2]") == (1, 2) and parse_value("(3,)") == (3,)
    assert parse_value("1003520") == 1003520 and parse_value("2.5") == 2.5
    assert parse_value("true") is True and parse_value("None") is None
    assert parse_value("bicubic") == "bicubic"


def test_python_m_and_version():
    import vlmprep
    r = subprocess.run([sys.executable, "-m", "vlmprep", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"vlmprep {vlmprep.__version__}"
    r = subprocess.run([sys.executable, "-m", "vlmprep", "plan", "--size", "1920x1080"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "2691" in r.stdout
    r = subprocess.run([sys.executable, "-m", "vlmprep"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "usage: vlmprep" in r.stderr


def test_help_says_each_default_once():
    for cmd in ("plan", "info", "bench"):
        rc, out, _ = _run(cmd, "--help")
        assert rc == 0
        assert "(default: None)" not in out, cmd
        for block in re.split(r"\n  (?=-)", out):  # one block per option
            assert block.count("default:") <= 1, (cmd, block)


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
