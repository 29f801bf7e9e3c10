"""Renders a hostile-corpus report (VLMPREP_HOSTILE_REPORT's JSON) as markdown: totals per
group, backend and mode, then every failing case with its exact problem and the issue-13 area
it belongs to.

    VLMPREP_HOSTILE_REPORT=/tmp/h.json .venv/bin/python -m pytest -q tests/hostile
    .venv/bin/python tests/hostile/hostile_status.py /tmp/h.json > status.md
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

# (predicate on group, case, problem) -> issue-13 area; first match wins
_AREAS = [
    (lambda g, c, p: "crash" in p and g.startswith("page_end"), "#1 kernel over-read (KERNELS)"),
    (lambda g, c, p: "crash" in p and "dali" in p.lower(), "DALI backend crash"),
    (lambda g, c, p: "event loop" in p, "#5 event-loop stall (INPUTS/serve)"),
    (lambda g, c, p: g == "special", "#3/#8/#9 special files and paths (INPUTS)"),
    (lambda g, c, p: g == "arrays", "#8/#9 per-item exceptions, arrays, buffers (INPUTS)"),
    (lambda g, c, p: "zTXt" in c or "iTXt" in c, "#5 metadata inflation (DECODE)"),
    (lambda g, c, p: g in ("memory", "budget") or "peak memory" in p, "#7 decode memory / budget (DECODE)"),
    (lambda g, c, p: "zeros" in c or "sparse" in c, "#4 zero padding / input bytes (DECODE)"),
    (lambda g, c, p: g in ("truncated", "corrupt", "formats"), "#6 truncated/corrupt data (DECODE)"),
]


def area(group: str, case: str, problem: str) -> str:
    for pred, name in _AREAS:
        if pred(group, case, problem):
            return name
    return "unassigned"


def render(report: dict) -> str:
    out = ["| group | backend | mode | cases | failing |", "|---|---|---|---|---|"]
    fails = []
    for g, rows in report.items():
        per = defaultdict(lambda: [0, 0])
        for case, b, m, r in rows:
            per[(b, m)][0] += 1
            if r.get("problems"):
                per[(b, m)][1] += 1
                fails.append((g, case, b, m, r["problems"]))
        for (b, m), (n, f) in per.items():
            out.append(f"| {g} | {b} | {m} | {n} | {f} |")
    out.append("")
    by_area = defaultdict(list)
    for g, case, b, m, ps in fails:
        by_area[area(g, case, ps[0])].append((g, case, b, m, ps))
    for a, items in sorted(by_area.items()):
        out.append(f"### {a}: {len(items)} failing steps")
        out.append("")
        for g, case, b, m, ps in items:
            for p in ps:
                p1 = p.replace("\n", " ⏎ ")
                out.append(f"- `{g}` / `{case}` [{b}, {m}]: {p1[:600]}")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(json.load(open(sys.argv[1]))))
