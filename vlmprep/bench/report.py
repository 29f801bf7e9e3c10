"""The human report of ``vlmprep bench``: plain aligned tables on stdout, one section per kind of
measurement in a result dict (``harness.run``'s, or ``video.run_video``'s for ``--video``)."""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["print_table", "print_report", "print_video_report", "print_documents_report"]


def print_table(rows: list[dict], columns: Sequence[str]) -> None:
    """A plain aligned table on stdout."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _thr(r: dict) -> str:
    return str(r["threads"]) if r["threads"] != "default" else f"default ({r['vlmprep_threads']})"


def _form(r: dict) -> str:
    return r.get("row_form", "full")


def _f(x, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def _x(r: dict, key: str) -> str:
    """``r[key]`` as a ratio ("1.23x"), "-" without one."""
    return f"{r[key]:.2f}x" if key in r else "-"


# -- images --------------------------------------------------------------------------------------
def print_report(result: dict) -> None:
    """The tables of an image run: header, end to end, stages, decode floor, transformers,
    floors and ratios (a section only when the run measured it)."""
    _print_header(result)
    rows = result["results"]
    _print_end_to_end(rows)
    if any(r.get("stages_ms") or r.get("stages_error") for r in rows):
        _print_stages(rows)
    if result["decode_floor"]:
        _print_decode_floor(result["decode_floor"])
    if result["hf"]:
        _print_hf(result["hf"])
    if result.get("write_floor") or result.get("resize_floor"):
        _print_floors(result)
    if any("ratio_vs_decode_floor" in r or "speedup_vs_hf_pil" in r for r in rows):
        _print_ratios(rows)


def _print_cpu_paths(result: dict) -> None:
    """The kernels' CPU paths (``kernels.cpu_paths``): every figure below comes from them."""
    paths = (result.get("kernels") or {}).get("cpu_paths")
    if paths:
        cap = f" (VLMPREP_CPU_ISA={paths['cap']})" if paths.get("cap") else ""
        print(f"cpu paths: resize {paths['resize']}, normalize_patchify {paths['normalize_patchify']}{cap}")


def _print_header(result: dict) -> None:
    """Where and how it ran, the library versions, and each input set."""
    m, v, cfg = result["machine"], result["versions"], result["config"]
    print(f"vlmprep bench: preset {result['preset']['name']} on {m['name']} ({m['cpu_model']}, "
          f"{m['usable_cpus']} CPUs{', ' + ', '.join(m['gpus']) if m['gpus'] else ''}); device "
          f"{cfg['device']}, batch {cfg['batch_size']}, {cfg['repeat']} timed passes")
    _print_cpu_paths(result)
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val)
          + f"; compiled kernels: {'loaded' if result['kernels']['built'] else 'not loaded'}")
    for i in result["inputs"]:
        size = f"{i['width']}x{i['height']} (WxH)" if i["width"] else "mixed sizes"
        print(f"inputs {i['label']}: {i['count']} {'/'.join(i['formats']).upper()} "
              f"{'mosaics ' if i['synthetic'] else 'files, '}{size}, "
              f"{i['mean_megapixels']:.2f} MP and {i['mean_bytes'] / 1024:.0f} KiB each on average")
        for sk in i.get("skipped") or []:
            print(f"  skipped {sk['name']}: {sk['reason']}")


def _print_end_to_end(rows: list[dict]) -> None:
    print("\nend to end: Processor(...)(encoded bytes); ms/img = batch latency / batch size")
    print_table([{
        "inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"], "rows": _form(r),
        "threads": _thr(r),
        "images/s": _f(r["images_per_s"], ".2f"), "MP/s": _f(r["megapixels_per_s"]),
        "tokens/s": _f(r["visual_tokens_per_s"], ".0f"),
        "ms/img p50": _f(r["per_image_p50_ms"]), "p99": _f(r["per_image_p99_ms"]),
        "min": _f(r.get("per_image_min_ms")),
        "batch p50": _f(r["batch_p50_ms"]), "batch p99": _f(r["batch_p99_ms"]),
        "cores": _f(r["cpu_cores_used"], ".2f"), "peak RSS MiB": _f(r["peak_rss_mib"], ".0f"),
    } for r in rows], ["inputs", "backend", "dtype", "rows", "threads", "images/s", "MP/s", "tokens/s",
                       "ms/img p50", "p99", "min", "batch p50", "batch p99", "cores",
                       "peak RSS MiB"])


def _print_stages(rows: list[dict]) -> None:
    print("\nstages, each run separately through the backend's lowerings (p50 ms per image)")
    table = []
    for r in rows:
        s = r.get("stages_ms") or {}
        table.append({"inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"],
                      "rows": _form(r),
                      "threads": _thr(r), "probe": _f(s.get("probe_ms"), ".2f"),
                      "decode": _f(s.get("decode_ms")), "resize": _f(s.get("resize_ms")),
                      "normalize+patchify+pack": _f(s.get("normalize_patchify_pack_ms")),
                      "transfer": _f(s.get("transfer_ms")),
                      "sum": _f(r.get("stage_sum_ms")),
                      "end to end": _f(r["per_image_p50_ms"]),
                      "note": r.get("stages_error") or ""})
    print_table(table, ["inputs", "backend", "dtype", "rows", "threads", "probe", "decode",
                        "resize",
                        "normalize+patchify+pack", "transfer", "sum", "end to end", "note"])


def _print_decode_floor(floors: list[dict]) -> None:
    print("\ndecode floor: decode only, one thread (p50 ms per image)")
    names = list(dict.fromkeys(n for f in floors for n in f["decoders"]))
    table = []
    for f in floors:
        row = {"inputs": f["size"]}
        row.update({n: _f(f["decoders"].get(n, {}).get("per_image_p50_ms")) for n in names})
        row["floor"] = f"{_f(f['decode_floor_ms'])} ({f['fastest']})"
        row["left out"] = "; ".join(f"{k}: {w}" for k, w in f["unavailable"].items())
        table.append(row)
    print_table(table, ["inputs", *names, "floor", "left out"])


#: ``same_output_shape_as_vlmprep`` in the report (None: not compared)
_SAME: dict[Any, str] = {True: "yes", False: "NO"}


def _print_hf(hf: list[dict]) -> None:
    print("\ntransformers processors: PIL open + convert('RGB') inside each call, same batches")
    print_table([{
        "inputs": h["size"], "processor": h["class"], "threads": _thr(h),
        "images/s": _f(h["images_per_s"], ".2f"), "ms/img p50": _f(h["per_image_p50_ms"]),
        "p99": _f(h["per_image_p99_ms"]), "cores": _f(h["cpu_cores_used"], ".2f"),
        "same shape": _SAME.get(h.get("same_output_shape_as_vlmprep"), "-"),
    } for h in hf], ["inputs", "processor", "threads", "images/s", "ms/img p50", "p99",
                     "cores", "same shape"])


def _print_floors(result: dict) -> None:
    """Per input set, dtype and row form: the three floors and the lower bound they sum to."""
    print("\nfloors, one thread (p50 ms per image): decode (fastest decoder) + output write "
          "(streamed stores of the output bytes) + exact resize (compiled, alone) = lower "
          "bound")
    decode = {f["size"]: f.get("decode_floor_ms") for f in result["decode_floor"]}
    mins = {f["size"]: f.get("decode_floor_min_ms") for f in result["decode_floor"]}
    resize = {f["size"]: f for f in result.get("resize_floor", [])}
    table = []
    for w in result.get("write_floor", []):
        rz = resize.get(w["size"], {}).get("resize_floor_ms")
        d = decode.get(w["size"])
        parts = (d, w["write_floor_ms"], rz)
        low = (mins.get(w["size"]), w.get("write_floor_min_ms"),
               resize.get(w["size"], {}).get("resize_floor_min_ms"))
        table.append({
            "inputs": w["size"], "dtype": w["dtype"], "rows": w["row_form"],
            "decode": _f(d), "output MB": _f(w["write_floor_bytes"] / 1e6),
            "write": _f(w["write_floor_ms"], ".2f"),
            "GB/s": _f(w.get("write_floor_GB_per_s")),
            "resize": _f(rz, ".2f"),
            "lower bound": _f(sum(parts)) if None not in parts else "-",
            "min: lower bound": _f(sum(low)) if None not in low else "-",
            "note": w.get("why") or ""})
    print_table(table, ["inputs", "dtype", "rows", "decode", "output MB", "write", "GB/s",
                        "resize", "lower bound", "min: lower bound", "note"])


def _print_ratios(rows: list[dict]) -> None:
    print("\nratios (per-image p50): vlmprep time / decode floor and / lower bound (one "
          "thread's floors); transformers time / vlmprep time")
    table = []
    for r in rows:
        mb = r.get("min_based", {})
        table.append({
            "inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"],
            "rows": _form(r), "threads": _thr(r),
            "x decode floor": _x(r, "ratio_vs_decode_floor"),
            "x lower bound": _x(r, "ratio_vs_lower_bound"),
            "min: x decode floor": _x(mb, "ratio_vs_decode_floor") if "min_based" in r else "-",
            "min: x lower bound": _x(mb, "ratio_vs_lower_bound") if "min_based" in r else "-",
            "speedup vs hf pil": _x(r, "speedup_vs_hf_pil"),
            "speedup vs hf torchvision": _x(r, "speedup_vs_hf_torchvision"),
        })
    print_table(table, ["inputs", "backend", "dtype", "rows", "threads", "x decode floor",
                        "x lower bound", "min: x decode floor", "min: x lower bound",
                        "speedup vs hf pil", "speedup vs hf torchvision"])


# -- video ---------------------------------------------------------------------------------------
#: (result row key, table label) of each ``--video`` part, in table order ("{hf}": the
#: transformers processor's class)
_VIDEO_PARTS = [("vlmprep", "vlmprep end to end"), ("decode", "decode (shared)"),
                ("vlmprep_rest", "vlmprep rest"), ("transformers", "{hf}"),
                ("transformers_file", "{hf} from the file"),
                ("output_write_floor", "output write floor")]


def print_video_report(result: dict) -> None:
    """The ``--video`` tables: per thread count, p50 ms and clips/s / frames/s of each part."""
    _print_video_header(result)
    _print_video_parts(result)
    if any("speedup_rest" in r for r in result["results"]):
        _print_video_speedups(result["results"])


def _print_video_header(result: dict) -> None:
    m, c, cfg = result["machine"], result["clip"], result["config"]
    print(f"vlmprep bench --video: preset {result['preset']['name']} on {m['name']} "
          f"({m['cpu_model']}, {m['usable_cpus']} CPUs); {cfg['repeat']} timed calls, dtype "
          f"{cfg['dtype']}, decoder {cfg['decoder']}")
    _print_cpu_paths(result)
    print(f"clip: {c['width']}x{c['height']} (WxH), {c['seconds']:g} s at {c['source_fps']:g} fps "
          f"({c['total_num_frames']} frames), {c['fourcc']} in {c['container']}, "
          f"{c['bytes'] / 1e6:.1f} MB; sampled at {c['sampling_fps']:g} fps -> "
          f"{c['sampled_frames']} frames, resized to {c['resized_hw'][1]}x{c['resized_hw'][0]}, "
          f"grid {c['grid_thw']}, {c['num_tokens']} tokens")


def _print_video_parts(result: dict) -> None:
    hf = result.get("hf_class") or ""
    table = []
    for r in result["results"]:
        for key, label in _VIDEO_PARTS:
            if key not in r:
                continue
            x = r[key]
            table.append({"threads": str(r["threads"]), "part": label.format(hf=hf),
                          "ms/clip p50": _f(x["p50_ms"]), "p99": _f(x["p99_ms"]),
                          "clips/s": _f(x["clips_per_s"], ".3f"),
                          "frames/s": _f(x["frames_per_s"]),
                          "cores": _f(x["cpu_cores_used"], ".2f")})
    print_table(table, ["threads", "part", "ms/clip p50", "p99", "clips/s", "frames/s", "cores"])


def _print_video_speedups(results: list[dict]) -> None:
    print("\nspeedup vs transformers (p50): rest = its processor / vlmprep rest; end to end ="
          " (decode + its processor) / vlmprep end to end; vs bound = vlmprep end to end /"
          " (decode + vlmprep rest)")
    print_table([{"threads": str(r["threads"]), "rest": f"{r['speedup_rest']:.2f}x",
                  "end to end": f"{r['speedup_end_to_end']:.2f}x",
                  "from the file": (f"{r['speedup_file']:.2f}x" if "speedup_file" in r
                                    else "-"),
                  "decode share": f"{r['decode_share_of_vlmprep']:.0%}",
                  "vs bound": (f"{r['end_to_end_vs_bound']:.2f}x" if "end_to_end_vs_bound" in r
                               else "-"),
                  "same output": ("yes" if r.get("same_output") else
                                  f"no (max diff {r.get('max_abs_diff_vs_transformers')})")}
                 for r in results],
                ["threads", "rest", "end to end", "from the file", "decode share",
                 "vs bound", "same output"])


# -- documents -----------------------------------------------------------------------------------
def print_documents_report(result: dict) -> None:
    """The ``--documents`` tables: pages/s and peak RSS of each side per page count and thread
    count, the speedups and the render floor, peak RSS against page count, the 5x target."""
    m, d, cfg = result["machine"], result["document"], result["config"]
    print(f"vlmprep bench --documents: preset {result['preset']} on {m['name']} "
          f"({m['cpu_model']}, {m['usable_cpus']} CPUs), load average before "
          f"{result.get('load_average_before')}, after {result.get('load_average_after')}")
    print(f"PDF: {d['pages']} US Letter pages (and {2 * d['pages']}) at {d['dpi']:g} dpi -> "
          f"{d['source_hw'][1]}x{d['source_hw'][0]} px, resized to {d['resized_hw'][1]}x"
          f"{d['resized_hw'][0]}, {d['tokens_per_page']} tokens a page; baseline: "
          f"{cfg['baseline_renderer']} {cfg['baseline_renderer_version']} + transformers "
          f"{', '.join(cfg['hf_classes'].values())}, {cfg['pages_per_batch']} page(s) per call; "
          f"each measurement in its own subprocess, median of {cfg.get('rounds', 1)} round(s)")
    table = []
    for r in result["results"]:
        for name in [k for k in r if isinstance(r[k], dict)]:
            x = r[name]
            table.append({"pages": str(r["pages"]), "threads": str(r["threads"]), "side": name,
                          "pages/s": _f(x["pages_per_s"], ".2f"),
                          "ms/page": _f(x["ms_per_page"]),
                          "cores": _f(x["cpu_cores_used"], ".2f"),
                          "peak RSS MiB": _f(x.get("max_peak_rss_total_mib",
                                                   x["peak_rss_total_mib"]), ".0f"),
                          "render s": _f(x.get("render_s"), ".2f"),
                          "rounds pages/s": " ".join(_f(v, ".1f") for v in
                                                     x.get("rounds_pages_per_s", [])),
                          "load": " ".join(str(v) for v in (x.get("load_average_before") or [])[:1])})
    print_table(table, ["pages", "threads", "side", "pages/s", "ms/page", "cores",
                        "peak RSS MiB", "render s", "rounds pages/s", "load"])
    backends = cfg["hf_backends"]
    print("\nspeedup = baseline time / vlmprep time; x floor = vlmprep time / pypdfium2 render "
          "alone; bound = baseline time / render alone")
    print_table([{"pages": str(r["pages"]), "threads": str(r["threads"]),
                  **{f"vs {b}": _x(r, f"speedup_vs_{b}") for b in backends},
                  "x floor": _x(r, "x_render_floor"),
                  **{f"bound {b}": _x(r, f"speedup_bound_{b}") for b in backends}}
                 for r in result["results"]],
                ["pages", "threads", *[f"vs {b}" for b in backends], "x floor",
                 *[f"bound {b}" for b in backends]])
    if any("rss_growth_mib" in x for x in result["memory"]):
        print("\npeak RSS (MiB, subprocess + its workers) against page count")
        counts = [str(c) for c in cfg["page_counts"]]
        print_table([{"threads": str(x["threads"]), "side": x["side"],
                      **{f"{c} pages": _f(x["peak_rss_total_mib"].get(c), ".0f") for c in counts},
                      "growth": _f(x.get("rss_growth_mib")),
                      "KiB/page": _f(x.get("per_page_kib"), ".0f")} for x in result["memory"]],
                    ["threads", "side", *[f"{c} pages" for c in counts], "growth", "KiB/page"])
    t = result["target"]
    print(f"\ntarget {t['speedup']:g}x the fastest baseline at {t['pages']} pages: "
          + ("met" if t["met"] else "not met") + "; "
          + ", ".join(f"{x['threads']} thread(s): {x['speedup']:.2f}x vs {x['fastest_baseline']} "
                      f"(bound by the render alone: {x['speedup_bound']:.2f}x)"
                      for x in t["per_thread"]))
    print(f"wall time {result.get('wall_s')} s")
