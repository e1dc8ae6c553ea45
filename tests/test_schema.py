"""Schema inspection: in process and against a real ipykernel."""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pandas as pd
import pytest
from jupyter_client import AsyncKernelClient

from jupyter_data_agent.kernel import rpc
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.inkernel.schema import (
    ColumnInfo,
    FrameSchema,
    SchemaInspectionError,
    inspect_kernel,
    inspect_namespace,
    inspection_request_code,
    schema_block,
)

SIMPLE_BLOCK = "\n".join(
    [
        "# Schema of Dataframes:",
        "# Columns in simple with example values:",
        "# a (1), b (x)",
        "# simple: 3 rows x 2 columns; dtypes: a=int64, b=str",
    ]
)

# Frames are defined in this order; `newest` last so default max_frames=10
# has something to drop (13 frames + 1 series + 1 private frame).
KERNEL_SETUP = r'''
import os
import time
import numpy as np
import pandas as pd
import pandas as pandas_alias

class LoudFrame(pd.DataFrame):
    def __repr__(self):
        raise RuntimeError("repr exploded")
    __str__ = __repr__
    def _repr_html_(self):
        raise RuntimeError("html exploded")

class Unprintable:
    def __str__(self):
        raise ValueError("no str")
    def __repr__(self):
        raise ValueError("no repr")

class Enormous:
    def __str__(self):
        return "z" * 5_000_000

simple = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]})
wide = pd.DataFrame([list(range(25))], columns=[f"c{i}" for i in range(25)])
multi = pd.DataFrame([[1, 2.5]], columns=pd.MultiIndex.from_tuples([("a", "b"), ("a", "c")]))
dup = pd.DataFrame([[1, "two"]], columns=["x", "x"])
cats = pd.DataFrame({"c": pd.Categorical([None, "lo", "hi"])})
tz = pd.DataFrame({"t": pd.date_range("2024-03-01", periods=2, tz="Europe/Paris")})
nulls = pd.DataFrame({"n": [None, None], "f": [np.nan, np.nan], "ok": [None, 7]})
loud = LoudFrame({"v": [1, 2]})
odd = pd.DataFrame({"u": [Unprintable()], "e": [Enormous()], "h": ["y" * 10_000], "nl": ["a\nb"]})
empty = pd.DataFrame({"a": pd.Series([], dtype="int64")})
s = pd.Series([np.nan, 3.5], name="price")
big = pd.DataFrame({"k": [None] * 5000 + ["late"]})
newest = pd.DataFrame({"z": [0]})
_private = pd.DataFrame({"p": [1]})
not_a_frame = {"a": 1}
'''

ALL_PUBLIC = [
    "simple", "wide", "multi", "dup", "cats", "tz", "nulls", "loud", "odd",
    "empty", "s", "big", "newest",
]  # fmt: skip


# --------------------------------------------------------------------------
# kernel fixtures (kept here, specifically named, rather than in conftest.py)


def _execute(kc, code: str, **kwargs) -> dict:
    errors: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "error":
            errors.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=120, output_hook=hook, **kwargs)
    assert reply["content"]["status"] == "ok", errors or reply["content"]
    return reply["content"]


def _kernel_eval(kc, expression: str):
    """Evaluate a read-only expression in the kernel without touching history."""
    return rpc.call(kc, expression, timeout=120)


@pytest.fixture(scope="module")
def schema_kernel():
    """One real ipykernel for the module, with the tricky frames defined."""
    km, kc = start_kernel()
    try:
        _execute(kc, KERNEL_SETUP)
        # Make `Out` and `_` non-trivial so we can see they are left alone.
        _execute(kc, "simple.shape")
        yield km, kc
    finally:
        stop_kernel(km, kc)


@pytest.fixture
async def schema_client(schema_kernel):
    """A fresh AsyncKernelClient (bound to this test's event loop)."""
    km, _ = schema_kernel
    client = AsyncKernelClient()
    client.load_connection_info(km.get_connection_info())
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        yield client
    finally:
        client.stop_channels()


async def _all_frames(client, **kwargs) -> dict[str, FrameSchema]:
    frames = await inspect_kernel(client, timeout=60, max_frames=50, **kwargs)
    return {f.name: f for f in frames}


# --------------------------------------------------------------------------
# against the real kernel


def test_kernel_runs_the_venv_python(schema_kernel):
    _, kc = schema_kernel
    executable = _kernel_eval(kc, "__import__('sys').executable")
    assert os.path.realpath(executable) == os.path.realpath(sys.executable)


async def test_simple_frame_exact_arcade_lines(schema_client):
    frames = await _all_frames(schema_client)
    assert schema_block([frames["simple"]]) == SIMPLE_BLOCK
    assert frames["simple"] == FrameSchema(
        name="simple",
        kind="DataFrame",
        shape=(3, 2),
        columns=[ColumnInfo("a", "int64", "1"), ColumnInfo("b", "str", "x")],
        total_columns=2,
        truncated=False,
    )


async def test_only_public_frames_and_series_in_definition_order(schema_client):
    frames = await inspect_kernel(schema_client, timeout=60, max_frames=50)
    # No modules, classes, dicts, `_private`, `In`/`Out`/`_`/`_i3`/`_5`.
    assert [f.name for f in frames] == ALL_PUBLIC


async def test_default_max_frames_keeps_the_most_recent(schema_client):
    frames = await inspect_kernel(schema_client, timeout=60)
    assert [f.name for f in frames] == ALL_PUBLIC[-10:]


async def test_more_than_20_columns(schema_client):
    wide = (await _all_frames(schema_client))["wide"]
    assert wide.total_columns == 25 and len(wide.columns) == 20 and wide.truncated
    lines = schema_block([wide]).splitlines()
    assert lines[1] == "# First 20 columns in wide with example values:"
    assert lines[2] == "# " + ", ".join(f"c{i} ({i})" for i in range(20))
    assert lines[3].startswith("# wide: 1 row x 25 columns; dtypes: c0=int64,")


async def test_multiindex_duplicate_categorical_tz_columns(schema_client):
    frames = await _all_frames(schema_client)
    assert schema_block([frames["multi"]]).splitlines()[2] == "# ('a', 'b') (1), ('a', 'c') (2.5)"
    assert [(c.name, c.dtype, c.example) for c in frames["dup"].columns] == [
        ("x", "int64", "1"),
        ("x", "str", "two"),
    ]
    assert frames["cats"].columns == [ColumnInfo("c", "category", "lo")]
    (t,) = frames["tz"].columns
    assert t.dtype.startswith("datetime64[") and t.dtype.endswith(", Europe/Paris]")
    assert t.example == "2024-03-01 00:00:00+01:00"


async def test_all_null_and_empty_columns(schema_client):
    frames = await _all_frames(schema_client)
    nulls_line = schema_block([frames["nulls"]]).splitlines()[2]
    assert nulls_line == "# n (all null), f (all null), ok (7.0)"
    assert frames["nulls"].columns[0].example is None
    assert schema_block([frames["empty"]]).splitlines()[1:] == [
        "# Columns in empty with example values:",
        "# a (empty)",
        "# empty: 0 rows x 1 column; dtypes: a=int64",
    ]
    # The first non-null value is found beyond the first chunk too.
    assert frames["big"].columns == [ColumnInfo("k", "str", "late")]


async def test_series_line(schema_client):
    s = (await _all_frames(schema_client))["s"]
    assert (s.kind, s.shape, s.total_columns) == ("Series", (2,), 1)
    assert schema_block([s]).splitlines()[1] == (
        "# Series s (name=price, dtype=float64, 2 rows) with example value: 3.5"
    )


async def test_raising_and_huge_reprs_are_bounded(schema_client):
    frames = await _all_frames(schema_client)
    assert frames["loud"].columns == [ColumnInfo("v", "int64", "1")]
    u, e, h, nl = frames["odd"].columns
    assert u.example == "<unprintable Unprintable>"
    assert e.example == "z" * 77 + "..."
    assert h.example == "y" * 77 + "..."
    assert nl.example == "a\\nb"  # one line, so the comment block stays intact
    for line in schema_block([frames["odd"]]).splitlines():
        assert line.startswith("# ")


async def test_namespace_history_and_out_unchanged(schema_kernel, schema_client):
    _, kc = schema_kernel
    snapshot = (
        "(sorted(globals()), get_ipython().run_line_magic('who_ls', ''),"
        " get_ipython().execution_count, id(_), repr(_), len(In), sorted(Out), _i, _ii)"
    )
    before = _kernel_eval(kc, snapshot)
    assert "_" in before[0] and before[5] > 1 and before[6]  # history really exists
    await inspect_kernel(schema_client, timeout=60)
    await inspect_kernel(schema_client, timeout=60, time_limit=0)
    assert _kernel_eval(kc, snapshot) == before


async def test_time_limit_flags_partial_result(schema_client):
    frames = await inspect_kernel(schema_client, timeout=60, max_frames=50, time_limit=0)
    assert [f.name for f in frames] == ALL_PUBLIC  # still listed, with shapes
    assert all(f.truncated and not f.columns for f in frames)
    assert frames[0].shape == (3, 2)
    block = schema_block(frames).splitlines()
    assert "# simple: 3 rows x 2 columns (columns not inspected)" in block
    assert "# Series s (2 rows; not inspected)" in block


async def test_works_when_kernel_cannot_import_the_package(schema_kernel, schema_client):
    _, kc = schema_kernel
    # Block the import for the duration (throwaway namespaces: no user names).
    _execute(kc, "exec(\"import sys; sys.modules['jupyter_data_agent'] = None\", {})",
             silent=True, store_history=False)  # fmt: skip
    try:
        frames = await _all_frames(schema_client)
        assert schema_block([frames["simple"]]) == SIMPLE_BLOCK
    finally:
        _execute(kc, "exec(\"import sys; sys.modules.pop('jupyter_data_agent')\", {})",
                 silent=True, store_history=False)  # fmt: skip


async def test_busy_kernel_times_out_then_recovers(schema_kernel, schema_client):
    _, kc = schema_kernel
    busy_id = kc.execute("__import__('time').sleep(3)", silent=True, store_history=False)
    try:
        with pytest.raises(SchemaInspectionError, match="did not answer"):
            await inspect_kernel(schema_client, timeout=0.5)
    finally:
        while kc.get_shell_msg(timeout=60)["parent_header"].get("msg_id") != busy_id:
            pass
    # The stale reply to the timed-out request is skipped, not mistaken for ours.
    frames = await inspect_kernel(schema_client, timeout=60)
    assert frames and frames[-1].name == "newest"


async def test_error_inside_kernel_is_reported(schema_kernel, schema_client):
    _, kc = schema_kernel
    _execute(kc, "exec = None", silent=True, store_history=False)  # shadows the builtin
    try:
        with pytest.raises(SchemaInspectionError, match="failed inside the kernel: TypeError"):
            await inspect_kernel(schema_client, timeout=60)
    finally:
        _execute(kc, "del exec", silent=True, store_history=False)
    assert await inspect_kernel(schema_client, timeout=60)


def test_rpc_errors_name_the_exception_and_the_wait(schema_kernel):
    _, kc = schema_kernel
    with pytest.raises(rpc.KernelExpressionError, match="^ZeroDivisionError: division by zero"):
        rpc.call(kc, "1/0", timeout=60)
    with pytest.raises(rpc.KernelTimeout, match="did not answer within 0.5 s"):
        rpc.call(kc, "__import__('time').sleep(2)", timeout=0.5)
    assert rpc.call(kc, "[1, 'a']", timeout=60) == [1, "a"]  # the stale reply is skipped


# --------------------------------------------------------------------------
# in process


class _Slow:
    def __str__(self):
        time.sleep(0.3)
        return "slow"


class _ClassBomb:
    @property
    def __class__(self):
        raise RuntimeError("do not touch")


def test_inspect_namespace_simple_exact_and_read_only():
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]})
    ns = {"pd": pd, "np": np, "simple": df, "_": df, "_5": df, "Out": {5: df}, 7: df}
    before = dict(ns)
    frames = inspect_namespace(ns)
    assert ns == before and all(ns[k] is before[k] for k in ns)
    assert schema_block(frames) == SIMPLE_BLOCK


def test_inspect_namespace_without_frames():
    assert inspect_namespace({}) == []
    assert inspect_namespace({"x": 1, "bomb": _ClassBomb()}) == []
    assert schema_block([]) == ""


def test_inspect_namespace_time_limit_stops_midway():
    ns = {
        "old": pd.DataFrame({"p": [1], "q": [2]}),
        "new": pd.DataFrame({"slow": [_Slow()], "a": [1], "b": [2]}),
    }
    old, new = inspect_namespace(ns, time_limit=0.1)
    # The newest frame gets the time budget first; listing stays in definition order.
    assert (old.name, new.name) == ("old", "new")
    assert new.columns == [ColumnInfo("slow", "object", "slow")] and new.truncated
    assert old.columns == [] and old.truncated and old.shape == (1, 2)
    assert schema_block([old, new]).splitlines()[1:] == [
        "# old: 1 row x 2 columns (columns not inspected)",
        "# First 1 columns in new with example values:",
        "# slow (slow)",
        "# new: 1 row x 3 columns; dtypes: slow=object",
    ]


def test_inspect_namespace_limits_are_parameters():
    ns = {"df": pd.DataFrame({f"c{i}": ["v" * 50] for i in range(5)})}
    (frame,) = inspect_namespace(ns, max_columns=2, max_value_chars=10)
    assert [c.example for c in frame.columns] == ["vvvvvvv..."] * 2
    assert schema_block([frame]).splitlines()[1] == "# First 2 columns in df with example values:"
    assert inspect_namespace(ns, max_frames=0) == []
    no_columns = inspect_namespace({"e": pd.DataFrame()})
    assert schema_block(no_columns).splitlines()[1:] == [
        "# Columns in e with example values:",
        "# (no columns)",
        "# e: 0 rows x 0 columns",
    ]


def test_dict_round_trip_is_json_safe():
    frames = inspect_namespace({"s": pd.Series([None, "b"]), "df": pd.DataFrame({"a": [1]})})
    again = [FrameSchema.from_dict(json.loads(json.dumps(f.to_dict()))) for f in frames]
    assert again == frames
    assert frames[0].columns == [ColumnInfo("None", "str", "b")]


def test_request_code_is_a_self_contained_expression():
    code = inspection_request_code()
    compile(code, "<schema>", "eval")  # an expression: fit for user_expressions
    assert "jupyter_data_agent" not in code
    ns = {"df": pd.DataFrame({"a": [1]})}
    result = json.loads(eval(code, ns))
    assert set(ns) == {"df", "__builtins__"}  # eval adds only __builtins__
    assert [FrameSchema.from_dict(d).name for d in result] == ["df"]
