"""Learning curves as PNG (matplotlib, drawn off-screen): ``Result.plot`` and a curve
per trial for a Tuner's results."""

from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Optional, Sequence

from engine import constants
from engine._internal.storage.filesystem import Storage, is_uri, join, resolve


def plot_curves(frames: Dict[str, Any], metrics: Optional[Sequence[str]] = None,
                x: str = "training_iteration") -> bytes:
    """A PNG with one panel per metric and one line per entry of ``frames``.

    Args:
        frames: Label (a run or trial name) -> its metrics DataFrame.
        metrics: Columns to draw; None draws every numeric non-automatic column.
        x: The x axis column (the row number when a frame lacks it).

    Raises:
        ValueError: a metric no frame has, or one that is not numeric.
        ImportError: matplotlib is missing.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plot() needs matplotlib: pip install 'trainyard[tracking]'"
                          ) from exc
    names = _choose(frames, metrics, x)
    fig = Figure(figsize=(7.0, 2.4 * len(names) + 0.6), layout="constrained")
    axes = fig.subplots(len(names), 1, squeeze=False, sharex=True)[:, 0]
    for ax, metric in zip(axes, names):
        for label, df in frames.items():
            if metric in df.columns:
                xs = df[x] if x in df.columns else range(1, len(df) + 1)
                ax.plot(xs, df[metric], marker="." if len(df) < 50 else None, label=label)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    if len(frames) > 1:
        axes[0].legend(fontsize="small", loc="best")
    axes[-1].set_xlabel(x)
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def plot_results(results: Sequence[Any], metrics: Optional[Sequence[str]],
                 path: Optional[str], default_dir: str,
                 x: str = "training_iteration") -> str:
    """One line per ``Result`` (labelled with its run directory's name) written as a PNG
    to ``path``, or ``learning_curve.png`` in ``default_dir``; return where it went.
    ``Result.plot`` passes one result; a Tuner's ``ResultGrid.plot`` passes them all."""
    frames = {r.path.rstrip("/").rsplit("/", 1)[-1] or str(i): r.metrics_dataframe
              for i, r in enumerate(results)}
    return write_png(plot_curves(frames, metrics, x), path, default_dir)


def join_run_path(run_dir: str, name: str) -> str:
    """``name`` inside a run or experiment directory given as a local path or URI."""
    return join(run_dir, name) if is_uri(run_dir) else os.path.join(run_dir, name)


def write_png(png: bytes, path: Optional[str], run_dir: str) -> str:
    """Write ``png`` to ``path`` (default: ``learning_curve.png`` in ``run_dir``) through
    Storage; return where it went."""
    if path is None:
        path = join(run_dir, constants.PLOT_FILE) if is_uri(run_dir) \
            else os.path.join(run_dir, constants.PLOT_FILE)
    elif not is_uri(path):
        path = os.path.abspath(os.path.expanduser(path))
    fs, inner = resolve(path)
    storage = Storage(fs, inner.rsplit("/", 1)[0])
    storage.write_bytes_atomic(inner, png)
    return storage.display(inner)


def _choose(frames: Dict[str, Any], metrics: Optional[Sequence[str]], x: str) -> List[str]:
    columns: Dict[str, bool] = {}  # name -> numeric in some frame
    for df in frames.values():
        for name in df.columns:
            numeric = df[name].dtype.kind in "iuf"
            columns[name] = columns.get(name, False) or numeric
    if metrics is None:
        chosen = [c for c, num in columns.items()
                  if num and c != x and c not in constants.AUTOMATIC_FIELDS]
        if not chosen:
            raise ValueError("plot(): no numeric metric was reported; pass metrics=[...].")
        return chosen
    if isinstance(metrics, str):
        metrics = [metrics]
    missing = [m for m in metrics if m not in columns]
    if missing:
        raise ValueError(f"plot(metrics={list(metrics)!r}): {missing} never reported; "
                         f"reported: {sorted(columns)}")
    wrong = [m for m in metrics if not columns[m]]
    if wrong:
        raise ValueError(f"plot(): {wrong} are not numeric and cannot be drawn.")
    return list(metrics)
