"""Text summaries of matplotlib figures, for models that cannot see the image.

A plot in a prompt is otherwise ``<Figure size 640x480 with 1 Axes>``. The
summary says what a reader of the chart would: its title, each axes' labels,
limits and scale, and per series its kind, label, number of points and x/y
ranges (bars: count and height range; categorical ticks: the first labels),
plus the legend. It is made where the figure lives: in a kernel copy right
after a candidate ran (``cell_exec`` writes it as the figure output's
``text/plain``) and, for the active cell, in the live kernel from figures its
variables hold (:func:`inspection_request_code`, one silent request that only
reads artists).

Imported inside the kernel and its forks (``_jda_kernel``): standard library
only; matplotlib and numpy are looked at only when the kernel loaded them.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

#: Every summary starts with this; a notebook output whose text starts with it is a summary.
PLOT_PREFIX = "[plot"
#: What the prompt says for an image output no summary could be made for.
PLOT_MARKER = "[plot: image output]"
MAX_AXES = 6
MAX_SERIES = 8
MAX_TICK_LABELS = 8
MAX_CHARS = 1000  # the notebook reader keeps 1000 characters of an output (context/notebook.py)


def _num(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"


def _range(values: Any) -> str:
    """``lo – hi`` of the finite numbers in ``values`` ("" when there are none)."""
    finite = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            finite.append(f)
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    return _num(lo) if lo == hi else f"{_num(lo)} – {_num(hi)}"


def _quote(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _label(artist: Any) -> str:
    label = str(artist.get_label() or "")
    return "" if label.startswith("_") else f" {_quote(label)}"


def _xy(pairs: Any) -> tuple[list, list]:
    xs, ys = [], []
    for p in pairs:
        if len(p) >= 2:
            xs.append(p[0])
            ys.append(p[1])
    return xs, ys


def _ranges(xs: list, ys: list) -> str:
    parts = [f"{axis} {r}" for axis, r in (("x", _range(xs)), ("y", _range(ys))) if r]
    return (", " + ", ".join(parts)) if parts else ""


def _text_ticks(ax: Any, axis: str) -> str:
    """Tick labels of a categorical (text) axis: what the bars or points stand for."""
    try:
        labels = [t.get_text() for t in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())]
    except Exception:  # noqa: BLE001
        return ""
    labels = [s for s in labels if s]
    numeric = True
    for s in labels:
        try:
            float(s.replace("\u2212", "-").replace(",", ""))
        except ValueError:
            numeric = False
            break
    if not labels or numeric:
        return ""
    more = f" (+{len(labels) - MAX_TICK_LABELS} more)" if len(labels) > MAX_TICK_LABELS else ""
    return f"; {axis} categories " + ", ".join(_quote(s, 30) for s in labels[:MAX_TICK_LABELS]) + more


def _axis(ax: Any, axis: str) -> str:
    label = ax.get_xlabel() if axis == "x" else ax.get_ylabel()
    lim = ax.get_xlim() if axis == "x" else ax.get_ylim()
    scale = ax.get_xscale() if axis == "x" else ax.get_yscale()
    text = f"{axis} {_quote(label)}" if label else f"{axis} (no label)"
    text += f" from {_range([lim[0]])} to {_range([lim[1]])}"
    return text + (f" ({scale} scale)" if scale != "linear" else "")


def _series(ax: Any) -> list[str]:
    out: list[str] = []
    bar_patches: set[int] = set()
    for container in getattr(ax, "containers", []):
        patches = list(getattr(container, "patches", []) or [])
        if not patches:
            continue
        bar_patches.update(id(p) for p in patches)
        heights = [p.get_height() for p in patches]
        widths = [p.get_width() for p in patches]
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        values = widths if horizontal else heights
        out.append(f"bars{_label(container)}: {len(patches)} {'horizontal ' if horizontal else ''}bars, "
                   f"{'lengths' if horizontal else 'heights'} {_range(values) or 'none'}")
    for line in ax.get_lines():
        xs, ys = _xy(line.get_xydata())
        out.append(f"line{_label(line)}: {len(xs)} points{_ranges(xs, ys)}")
    for coll in ax.collections:
        kind = type(coll).__name__
        try:
            offsets = coll.get_offsets()
        except Exception:  # noqa: BLE001
            offsets = []
        if kind == "PathCollection":
            xs, ys = _xy(offsets)
            out.append(f"scatter{_label(coll)}: {len(xs)} points{_ranges(xs, ys)}")
        elif kind == "QuadMesh":
            arr = coll.get_array()
            shape = "x".join(str(n) for n in getattr(arr, "shape", ()))
            values = arr.ravel() if hasattr(arr, "ravel") else []
            out.append(f"heatmap{_label(coll)}: {shape or len(values)} cells, values {_range(values)}")
        elif kind in ("PolyCollection", "FillBetweenPolyCollection"):
            paths = coll.get_paths()
            xs, ys = _xy([v for p in paths for v in p.vertices])
            out.append(f"filled area{_label(coll)}: {len(paths)} polygons{_ranges(xs, ys)}")
        elif kind == "LineCollection":
            out.append(f"line segments{_label(coll)}: {len(coll.get_segments())}")
        else:
            out.append(f"{kind}{_label(coll)}")
    wedges = [p for p in ax.patches if type(p).__name__ == "Wedge"]
    if wedges:
        labels = [t.get_text() for t in ax.texts if t.get_text()]
        shares = [abs(w.theta2 - w.theta1) / 3.6 for w in wedges]
        out.append(f"pie: {len(wedges)} wedges, shares {_range(shares)} %"
                   + (f", labels {', '.join(_quote(s, 30) for s in labels[:MAX_TICK_LABELS])}" if labels else ""))
    others = [p for p in ax.patches if id(p) not in bar_patches and type(p).__name__ not in ("Wedge",)]
    if others:
        out.append(f"{len(others)} other shapes ({', '.join(sorted({type(p).__name__ for p in others}))})")
    for image in ax.get_images():
        arr = image.get_array()
        shape = "x".join(str(n) for n in getattr(arr, "shape", ()))
        out.append(f"image {shape}")
    if len(out) > MAX_SERIES:
        out = out[:MAX_SERIES] + [f"... {len(out) - MAX_SERIES} more series"]
    return out


def _legend(ax: Any) -> str:
    legend = ax.get_legend()
    if legend is None:
        return ""
    labels = [t.get_text() for t in legend.get_texts() if t.get_text()]
    title = legend.get_title().get_text()
    if not labels:
        return ""
    return ("legend" + (f" {_quote(title)}" if title else "") + ": "
            + ", ".join(_quote(s, 30) for s in labels[:MAX_SERIES])
            + (f" (+{len(labels) - MAX_SERIES} more)" if len(labels) > MAX_SERIES else ""))


def describe_figure(fig: Any) -> str:
    """The figure as text: a ``[plot: ...]`` head line, then per axes its labels and series."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    suptitle = getattr(fig, "_suptitle", None)
    title = suptitle.get_text() if suptitle is not None else ""
    head = f"{PLOT_PREFIX}: figure with {len(axes)} axes" + (f", title {_quote(title)}" if title else "") + "]"
    lines = [head]
    for i, ax in enumerate(axes[:MAX_AXES], 1):
        if type(ax).__name__ == "Colorbar" or ax.get_label() == "<colorbar>":
            lines.append(f"axes {i}: colorbar {_range(ax.get_ylim())}")
            continue
        ax_title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
        lines.append(f"axes {i}" + (f" {_quote(ax_title)}" if ax_title else "") + ": "
                     + "; ".join((_axis(ax, "x"), _axis(ax, "y")))
                     + _text_ticks(ax, "x") + _text_ticks(ax, "y"))
        lines += [f"  {s}" for s in _series(ax)]
        legend = _legend(ax)
        if legend:
            lines.append(f"  {legend}")
    if len(axes) > MAX_AXES:
        lines.append(f"... {len(axes) - MAX_AXES} more axes")
    text = "\n".join(lines)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 20].rstrip() + "\n...[summary cut]"


def summarize(fig: Any) -> str | None:
    """:func:`describe_figure`, or None when the figure cannot be read (never raises)."""
    try:
        return describe_figure(fig)
    except Exception:  # noqa: BLE001 - an odd artist must not break a cell's output
        return None


def with_summary(data: dict, described: set) -> dict:
    """A published figure's mime bundle with its summary as ``text/plain``.

    The inline backend (and ``display(fig)``) publish a figure as PNG plus
    ``<Figure size ...>``; the figure is still open then, so it is found among
    the open figures by that text (the first not ``described`` yet, as figures
    are shown in order). Anything else is returned unchanged; never raises.
    """
    try:
        plain = data.get("text/plain") if isinstance(data, dict) else None
        if not (isinstance(plain, str) and plain.startswith("<Figure") and "image/png" in data):
            return data
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        if helpers is None:
            return data
        for manager in helpers.Gcf.get_all_fig_managers():
            fig = manager.canvas.figure
            if id(fig) not in described and repr(fig) == plain:
                described.add(id(fig))
                summary = summarize(fig)
                return {**data, "text/plain": summary} if summary else data
    except Exception:  # noqa: BLE001, S110 -- a user figure may fail anything; the output is shown as it came
        pass
    return data


def figures_in(namespace: dict, names: Any = None) -> list[Any]:
    """Figures that ``names`` of ``namespace`` hold (a Figure, an Axes, an array of Axes), in
    the order named; without ``names``, matplotlib's open figures. Each figure once."""
    mpl_figure = sys.modules.get("matplotlib.figure")
    if mpl_figure is None:
        return []
    figs: list[Any] = []

    def add(obj: Any, depth: int = 0) -> None:
        if isinstance(obj, mpl_figure.Figure):
            if all(f is not obj for f in figs):
                figs.append(obj)
        elif hasattr(obj, "get_figure") and type(obj).__module__.startswith("matplotlib"):
            fig = obj.get_figure()
            if fig is not None:
                add(getattr(fig, "figure", fig), depth)
        elif depth < 1 and (isinstance(obj, (list, tuple)) or type(obj).__name__ == "ndarray"):
            try:
                items = list(obj.flat if hasattr(obj, "flat") else obj)[:32]
            except Exception:  # noqa: BLE001
                return
            for item in items:
                add(item, depth + 1)

    if names is None:  # read through Gcf: plt.figure(num) would change the current figure
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        for manager in helpers.Gcf.get_all_fig_managers() if helpers is not None else ():
            add(manager.canvas.figure)
        return figs
    for name in names:
        if name in namespace:
            add(namespace[name])
    return figs


def summaries(namespace: dict, names: Any = (), max_figures: int = 4) -> list:
    """Summaries of the figures ``names`` hold in ``namespace`` (else of the open figures)."""
    figs = figures_in(namespace, list(names)) or figures_in(namespace)
    return [s for s in (summarize(f) for f in figs[:max_figures]) if s]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def cell_names(cell_source: str) -> list[str]:
    """The names a cell's code mentions (the figures it may hold), first 200."""
    return list(dict.fromkeys(_IDENTIFIER.findall(cell_source)))[:200]


def request_code(cell_source: str, max_figures: int = 4) -> str:
    """A ``user_expressions`` expression (``kernel.rpc``) that evaluates to the summaries of the
    figures the cell's names hold in the live kernel (else of its open figures).

    Like the schema inspection it binds no name in the user namespace (this module runs in a
    throwaway dict) and only reads artists, so the user's state is unchanged.
    """
    names = cell_names(cell_source)
    source = Path(__file__).read_text(encoding="utf-8")
    return ("(lambda __jda_scope: (exec({src}, __jda_scope), "
            "__jda_scope['summaries'](globals(), {names!r}, {n!r}))[1])"
            "({{'__name__': '_jda_plots'}})").format(src=repr(source), names=names, n=max_figures)
