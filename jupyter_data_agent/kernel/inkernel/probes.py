"""Evidence from a copy: cheap probes of its tables, compared with its parent's (DataPRM's idea).

A step can run without error and still be wrong: a merge that drops or
duplicates rows, a conversion that turns numbers into NaN or strings, a
filter that leaves nothing. The copy holds the state, so a bounded look at it
after each step catches these silent errors nearly for free.

``CELL`` is a plain cell (standard library, pandas and numpy only where the
kernel has them) run in a copy right after a step: it summarises every user
DataFrame and Series (rows, index uniqueness, per column its dtype, NaN
count, range and distinct count, bounded by ``SUMMARY_CELLS``), compares the
summary with the one its parent left (a fork inherits it), prints the
findings as one JSON line and keeps its own summary for its children. Run
once on the root copy before a search, it sets the baseline. A copy
rebuilt by replay replays it harmlessly.

Each table that a step created or changed is compared with the same name's
table in the parent, or else with the parent's table sharing most columns
(the frame a merge, filter or groupby came from). Probes (``PROBES``):

- ``rows``: a merge (every column of the source, and new ones) lost rows,
  or a merge or a same-name step with the same columns duplicated rows;
- ``nan``: a shared column holds a larger share of NaN than before, or a new
  column is all NaN;
- ``dtype``: a numeric column became object (numbers parsed as strings);
- ``empty``: a new or changed table with no rows or no columns, or a new
  column with one value over several rows;
- ``index``: the index was unique and is no longer;
- ``range``: a shared numeric column of a table with the parent's rows left
  the range observed in the parent (a wrong fill value, a unit slip).

The answer's type against the question, and agreement with other answers,
need no copy: ``search.evidence`` adds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MARK = "__jda_probe_state__"
#: Tables summarised in full (NaN counts, ranges, distinct counts) up to this many cells;
#: larger ones by shape, index and dtypes only, so a probe stays cheap at any state size.
SUMMARY_CELLS = 2_000_000
#: Variables and columns looked at, at most; findings reported at most.
MAX_TABLES = 50
MAX_COLUMNS = 300
MAX_FINDINGS = 20

#: Every probe this module runs, in the order the sidebar lists them.
PROBES: tuple[str, ...] = ("rows", "nan", "dtype", "empty", "index", "range")

CELL = r'''
def __jda_probe(ns, mark=%(mark)r, _cells=%(cells)d, _tables=%(tables)d, _cols=%(cols)d, _max=%(max)d):
    import json, sys
    pd = sys.modules.get("pandas")
    if pd is None:
        print(json.dumps({"findings": [], "tables": 0}))
        return
    def summary(obj):
        frame = obj.to_frame() if isinstance(obj, pd.Series) else obj
        full = frame.size <= _cells
        cols = {}
        for i, c in enumerate(list(frame.columns)[:_cols]):
            s = frame.iloc[:, i]
            info = {"dtype": str(s.dtype), "kind": getattr(s.dtype, "kind", "O")}
            if full:
                try:
                    info["nan"] = int(s.isna().sum())
                    info["distinct"] = int(s.nunique(dropna=False)) if len(s) else 0
                    if info["kind"] in "iuf" and len(s) - info["nan"] > 0:
                        info["min"], info["max"] = float(s.min()), float(s.max())
                except Exception:
                    pass
            cols[str(c)] = info
        try:
            unique = bool(frame.index.is_unique)
        except Exception:
            unique = None
        return {"rows": int(frame.shape[0]), "ncols": int(frame.shape[1]), "unique": unique,
                "id": id(obj), "cols": cols}
    now = {}
    for name, obj in list(ns.items()):
        if len(now) >= _tables:
            break
        if name.startswith("_") or not isinstance(obj, (pd.DataFrame, pd.Series)):
            continue
        try:
            now[name] = summary(obj)
        except Exception:
            pass
    before = ns.get(mark)
    ns[mark] = now
    if before is None:
        print(json.dumps({"findings": [], "tables": len(now), "baseline": True}))
        return
    findings = []
    def say(probe, name, detail):
        if len(findings) < _max:
            findings.append({"probe": probe, "table": name, "detail": detail})
    for name, cur in now.items():
        old = before.get(name)
        if old is not None and old == cur:
            continue  # unchanged (same object, same summary)
        ref, ref_name = old, name
        if ref is None:
            shared = [(len(set(b["cols"]) & set(cur["cols"])), n) for n, b in before.items()]
            shared = [s for s in shared if s[0] > 0]
            if shared:
                ref_name = max(shared)[1]
                ref = before[ref_name]
        if cur["rows"] == 0 or cur["ncols"] == 0:
            say("empty", name, f"{name} has {cur['rows']} rows and {cur['ncols']} columns")
            continue
        if ref is None:
            continue
        new_cols = [c for c in cur["cols"] if c not in ref["cols"]]
        common = [c for c in cur["cols"] if c in ref["cols"]]
        merged = bool(new_cols) and bool(common) and cur["ncols"] > ref["ncols"] \
            and len(common) == len(ref["cols"])
        if merged and cur["rows"] < ref["rows"]:
            say("rows", name, f"{name} lost {ref['rows'] - cur['rows']} of {ref_name}'s {ref['rows']} "
                              f"rows when columns were added")
        elif (merged or (old is not None and set(cur["cols"]) == set(ref["cols"]))) \
                and cur["rows"] > ref["rows"]:
            say("rows", name, f"{name} has {cur['rows'] - ref['rows']} more rows than {ref_name} "
                              f"({ref['rows']}): duplicated?")
        if ref.get("unique") and cur.get("unique") is False and cur["rows"] > 1:
            say("index", name, f"{name}'s index has duplicates; {ref_name}'s was unique")
        for c in common:
            a, b = ref["cols"][c], cur["cols"][c]
            if a["kind"] in "iufb" and b["kind"] == "O":
                say("dtype", name, f"{name}[{c!r}] turned from {a['dtype']} into object")
            if "nan" in a and "nan" in b and cur["rows"] and ref["rows"] \
                    and b["nan"] / cur["rows"] > a["nan"] / ref["rows"] + 1e-12:
                say("nan", name, f"{name}[{c!r}] has {b['nan']} NaN of {cur['rows']} "
                                 f"({a['nan']} of {ref['rows']} in {ref_name})")
            if "min" in a and "min" in b and b["kind"] in "iuf" and cur["rows"] == ref["rows"] and (
                    b["min"] < a["min"] - 1e-9 * max(1.0, abs(a["min"]))
                    or b["max"] > a["max"] + 1e-9 * max(1.0, abs(a["max"]))):
                say("range", name, f"{name}[{c!r}] spans {b['min']:g}..{b['max']:g}, outside "
                                   f"{ref_name}'s {a['min']:g}..{a['max']:g}")
        for c in new_cols:
            b = cur["cols"][c]
            if b.get("nan") == cur["rows"]:
                say("nan", name, f"new column {name}[{c!r}] is all NaN")
            elif b.get("distinct") == 1 and cur["rows"] > 1 and cur["ncols"] > 1:
                say("empty", name, f"new column {name}[{c!r}] holds one value in {cur['rows']} rows")
    print(json.dumps({"findings": findings, "tables": len(now)}))
__jda_probe(globals())
del __jda_probe
''' % {"mark": MARK, "cells": SUMMARY_CELLS, "tables": MAX_TABLES, "cols": MAX_COLUMNS,
       "max": MAX_FINDINGS}


@dataclass(frozen=True)
class Check:
    """One probe's verdict on a step: passed, or what it found (``detail``)."""

    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Finding:
    probe: str
    table: str
    detail: str


def parse(stdout: str) -> list[Finding] | None:
    """The findings ``CELL`` printed (the copy's word: read defensively, bounded); None: no report."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        return None
    out = []
    for d in data["findings"][:MAX_FINDINGS]:
        if isinstance(d, dict) and d.get("probe") in PROBES:
            out.append(Finding(str(d["probe"]), str(d.get("table", ""))[:200], str(d.get("detail", ""))[:300]))
    return out


def checks(findings: list[Finding]) -> list[Check]:
    """One check per probe: failed with the findings' details, or passed."""
    out = []
    for probe in PROBES:
        found = [f.detail for f in findings if f.probe == probe]
        out.append(Check(probe, not found, "; ".join(found)))
    return out


__all__ = ["CELL", "MARK", "PROBES", "Check", "Finding", "checks", "parse"]
