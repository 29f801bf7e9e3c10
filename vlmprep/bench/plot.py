"""``vlmprep bench --plot FILE.png``: images/s per backend and image size, as a bar chart."""
from __future__ import annotations

import importlib.util
import os

__all__ = ["series", "write_plot", "check_available"]


def check_available() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError("--plot needs matplotlib: pip install matplotlib")


def series(result: dict) -> tuple[list[str], dict[str, dict[str, float]]]:
    """``(sizes, {series label: {size: images_per_s}})``: one series per vlmprep backend (and
    dtype / thread count where more than one was run) and per transformers processor."""
    sizes = [i["label"] for i in result["inputs"]]
    rows = result["results"]
    multi_dtype = len({r["dtype"] for r in rows}) > 1
    multi_threads = len({str(r["threads"]) for r in rows + result["hf"]}) > 1
    out: dict[str, dict[str, float]] = {}

    def label(base: str, r: dict) -> str:
        return base + (f" t{r['threads']}" if multi_threads else "")

    for r in rows:
        name = f"vlmprep {r['backend']}" + (f" {r['dtype']}" if multi_dtype else "")
        out.setdefault(label(name, r), {})[r["size"]] = r["images_per_s"]
    for h in result["hf"]:
        out.setdefault(label(f"transformers {h['processor']}", h), {})[h["size"]] = h["images_per_s"]
    return sizes, out


def _num(y: float) -> str:
    return "" if not y else f"{y:.0f}" if y >= 100 else f"{y:.3g}"


def write_plot(result: dict, path: str | os.PathLike) -> None:
    """Write the bar chart (format from the file extension; PNG expected) with the Agg backend."""
    import matplotlib  # deferred: optional
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # deferred: optional
    from matplotlib.figure import Figure  # deferred: optional
    sizes, data = series(result)
    n = max(1, len(data))
    width = 0.8 / n
    fig = Figure(figsize=(max(7.0, 1.5 * len(sizes) + 0.35 * n + 3), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["tab20"]
    for k, (name, vals) in enumerate(data.items()):
        xs = [i + (k - (n - 1) / 2) * width for i in range(len(sizes))]
        ys = [vals.get(s, 0.0) for s in sizes]
        bars = ax.bar(xs, ys, width, label=name, color=cmap(k % 20))
        ax.bar_label(bars, labels=[_num(y) for y in ys], fontsize=6, padding=1,
                     rotation=90 if n > 4 else 0)
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_xlabel("image size")
    ax.set_ylabel("images/s (end to end, decode included)")
    m = result["machine"]
    cfg = result["config"]
    ax.set_title(f"{result['preset']['name']} on {m['name']} ({m['cpu_model']}), device "
                 f"{cfg['device']}, batch {cfg['batch_size']}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(os.fspath(path), dpi=110)
