"""MkDocs hook: the performance page's table, rendered from ``bench/results/latest.json``.

``python -m bench.run`` (``make bench``) writes that file; its ``rows`` hold one entry per
measured metric (ours and the anchor's median, min and max, the ratio, the target and the
verdict). ``docs/performance.md`` marks where the table goes with ``<!-- bench:table -->``
and where the run's description goes with ``<!-- bench:run -->``. Without the file, the
page says how to produce it instead of failing the build: a fresh checkout that has not
run the benchmarks still builds its docs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

TABLE_MARK = "<!-- bench:table -->"
RUN_MARK = "<!-- bench:run -->"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "latest.json"
MISSING = ("*No benchmark results in this checkout: `make bench` (or "
           "`python -m bench.run`) writes `bench/results/latest.json`, and the next "
           "`make docs` shows its table here.*")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the performance page's marks from the latest results; other pages pass."""
    if page.file.src_uri != "performance.md":
        return markdown
    results = _load(RESULTS)
    if results is None:
        return markdown.replace(TABLE_MARK, MISSING).replace(RUN_MARK, "")
    return (markdown.replace(TABLE_MARK, render_table(results.get("rows") or []))
            .replace(RUN_MARK, describe_run(results)))


def _load(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def describe_run(results: Dict[str, Any]) -> str:
    """One paragraph: where the numbers come from (the command, the machine, the source)."""
    machine = results.get("machine") or {}
    parts = [f"`{results['command']}`" if results.get("command") else "a `bench.run`"]
    if results.get("reps"):
        parts.append(f"{results['reps']} repetitions per side, alternating")
    what = []
    if machine.get("cpu_count_logical"):
        what.append(f"{machine['cpu_count_logical']} CPUs")
    if machine.get("memory_gb"):
        what.append(f"{machine['memory_gb']:g} GiB")
    for key, name in (("python", "Python"), ("ray_version", "Ray"), ("torch_version", "torch")):
        if machine.get(key):
            what.append(f"{name} {machine[key]}")
    text = "Measured by " + ", ".join(parts)
    if what:
        text += " on " + ", ".join(what)
    text += "."
    if results.get("source"):
        text += f" {results['source']}"
    return text


def render_table(rows: List[Dict[str, Any]]) -> str:
    """The Markdown table of ``rows`` as ``bench.run`` writes them."""
    out = ["| workload | metric | ours median (min–max) | anchor median (min–max) | "
           "ours/anchor | target | pass |", "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        unit = f" ({r['unit']})" if r.get("unit") else ""
        reps = (r.get("ours") or {}).get("n")
        verdict = {True: "PASS", False: "FAIL"}.get(r.get("pass"), "—")
        out.append(f"| {r['workload']}{f' ({reps} reps)' if reps else ''} | "
                   f"{r['metric']}{unit} | {_side(r.get('ours'))} | {_side(r.get('anchor'))} | "
                   f"{_fmt(r.get('ratio'))} | {r.get('target') or '—'} | {verdict} |")
    return "\n".join(out)


def _side(s: Optional[Dict[str, Any]]) -> str:
    if not s:
        return "—"
    return f"{_fmt(s.get('median'))} ({_fmt(s.get('min'))}–{_fmt(s.get('max'))})"


def _fmt(x: Any) -> str:
    """A number as ``bench.run`` prints it (three significant digits, thousands grouped)."""
    if x is None:
        return "—"
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return str(x)
