"""The live kernel's DataFrames and Series for the composer's ``@`` completion (and, for MCP
``list_variables``, its other variables).

The same silent schema inspection a turn makes (``KernelHandle.frames``, through
``server.kernels``), only cheaper: more frames, a few columns each, a short
wait. A busy kernel is not waited for: the popup says so instead of hanging on
a long cell.
"""

from __future__ import annotations

from typing import Any

from ..kernel.host.handle import NoKernel
from ..kernel.inkernel.schema import FrameSchema, KernelDidNotAnswer, SchemaInspectionError
from .kernels import KernelHandles
from .models import VariableInfo, VariablesReply

#: Frames listed, and column names per frame (the popup shows a few).
MAX_VARIABLES = 50
COLUMNS_SHOWN = 8
#: Seconds to wait for the kernel's reply (it answers at once unless a cell runs).
REPLY_TIMEOUT_S = 3.0


def variable_info(frame: FrameSchema) -> VariableInfo:
    return VariableInfo(name=frame.name, kind=frame.kind, shape=list(frame.shape),
                        columns=[c.name for c in frame.columns], total_columns=frame.total_columns)


async def kernel_variables(kernels: KernelHandles, kernel_id: str, timeout: float = REPLY_TIMEOUT_S
                           ) -> VariablesReply:
    """The frames in the kernel ``kernel_id``, or ``available=False`` with the reason."""
    reply, _ = await _read(kernels, kernel_id, timeout, others=False)
    return reply


async def kernel_variables_all(kernels: KernelHandles, kernel_id: str, timeout: float = REPLY_TIMEOUT_S
                               ) -> dict[str, Any]:
    """``kernel_variables``' reply as JSON, its ``variables`` followed by the kernel's other
    variables an outside agent asks about (MCP ``list_variables``): numpy arrays (shape, dtype),
    scalars (their value, bounded), containers (length), fitted models (class). The sidebar keeps
    ``kernel_variables``: its ``@`` completion offers frames only, in a typed reply the front end
    mirrors. Both reads go through one handle."""
    reply, others = await _read(kernels, kernel_id, timeout, others=True)
    data = reply.model_dump()
    data["variables"] += others
    return data


async def _read(kernels: KernelHandles, kernel_id: str, timeout: float, *,
                others: bool) -> tuple[VariablesReply, list[dict]]:
    from ..kernel.inkernel.survey import SurveyError

    found: list[dict] = []
    async with kernels.reading(kernel_id) as handle:
        if isinstance(handle, NoKernel):  # not running, or not reached (a gateway's handshake): said
            return VariablesReply(kernel_id=kernel_id, available=False,
                                  reason=f"Could not read the kernel's variables: {handle.reason}."), []
        try:
            frames = await handle.frames(timeout, max_frames=MAX_VARIABLES, max_columns=COLUMNS_SHOWN,
                                         max_value_chars=40, time_limit=1.0)
            if others:
                found = await handle.objects(timeout)
        except SchemaInspectionError as exc:
            busy = isinstance(exc, KernelDidNotAnswer)
            reason = ("The kernel is busy running a cell; its variables show once it is idle."
                      if busy else f"Could not read the kernel's variables: {exc}")
            return VariablesReply(kernel_id=kernel_id, available=False, reason=reason), []
        except SurveyError as exc:  # the frames were read: listed, and why the rest is not
            return VariablesReply(kernel_id=kernel_id, variables=[variable_info(f) for f in frames],
                                  reason=f"Only the DataFrames and Series: {exc}"), []
    return VariablesReply(kernel_id=kernel_id, variables=[variable_info(f) for f in frames]), found
