"""``%%agent``: ask for a cell from inside a notebook.

Runs in the user's kernel: context comes from the kernel's own history
(``In``/``Out``) and namespace, candidates run in forked copies of this very
kernel, and the chosen code is put in a new cell below with
``set_next_input`` — never executed here.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import sys
import threading
import warnings

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import Markdown, display

from .config import resolve_settings
from .kernel.policy import decide
from .llm.base import BackendError

USAGE = """\
Usage:
  %%agent [--samples N] [--strategy NAME] [--temperature T] [--model M] [--no-exemplars] [--no-exec]
  <what you want, in plain words>

  %agent config      show the active backend and model
"""


class AgentError(Exception):
    """A problem the user can fix; shown as one line, without a traceback."""


def _fail(message: str) -> None:
    print(f"jupyter-data-agent: {message}", file=sys.stderr)


def _markdown_escape_fence(code: str) -> str:
    return code.replace("```", "`\u200b``")


_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")
_SAFE_IMAGES = ("image/png", "image/jpeg")
_MAX_TABLE = 20


def _table_html(handle) -> str:
    """A DataFrame or Series value rebuilt as our own table, every cell escaped."""
    value = handle.value if handle is not None else None
    if not isinstance(value, dict) or not isinstance(value.get("values"), list):
        return ""
    esc = lambda v: html.escape(str(v))  # noqa: E731
    index = list(value.get("index") or [])
    if "columns" in value:
        header = "".join(f"<th>{esc(c)}</th>" for c in value.get("columns") or [])
        rows = value["values"]
    else:
        header = f"<th>{esc(value.get('name', ''))}</th>"
        rows = [[v] for v in value["values"]]
    body = []
    for i, row in enumerate(rows[:_MAX_TABLE]):
        label = esc(index[i]) if i < len(index) else ""
        cells = "".join(f"<td>{esc(v)}</td>" for v in (row if isinstance(row, list) else [row]))
        body.append(f"<tr><th>{label}</th>{cells}</tr>")
    shape = f"<div>{esc(' × '.join(map(str, handle.shape)))}</div>" if handle.shape else ""
    return f"<table><thead><tr><th></th>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>{shape}"


def preview_bundle(candidate) -> dict[str, str]:
    """The executed output of a candidate as a MIME bundle that holds only data.

    Text is escaped, images are PNG/JPEG with validated base64, tables are
    rebuilt from the value handle: a candidate's own HTML, SVG or JavaScript
    never reaches the page (it would run there as trusted output).
    """
    result = candidate.result
    if result is None:
        return {}
    if not result.ok:
        detail = f"{result.ename}: {result.evalue}" if result.ename else result.status
        if result.limit:
            detail += f" (stopped by the {result.limit} limit)"
        return {"text/html": "<div class='jp-DataAgent-preview jp-DataAgent-previewError'>"
                             f"<b>Output preview (kernel copy): error</b><pre>{html.escape(detail)}</pre></div>",
                "text/plain": f"Output preview (kernel copy): error\n{detail}"}
    parts, plain = [], []
    table = _table_html(result.value)
    for out in result.outputs:
        data = out.data or {}
        image = next((m for m in _SAFE_IMAGES if m in data), None)
        if out.output_type == "stream":
            parts.append(f"<pre>{html.escape(out.text or '')}</pre>")
            plain.append(out.text or "")
        elif image and isinstance(data[image], str) and _BASE64.match(data[image]):
            parts.append(f"<img src='data:{image};base64,{data[image].strip()}'/>")
            plain.append(f"[{image}]")
        elif out.output_type == "execute_result" and table:
            parts.append(table)
            plain.append(str(data.get("text/plain", "")))
            table = ""
        else:
            text = str(data.get("text/plain", ""))
            if text:
                parts.append(f"<pre>{html.escape(text)}</pre>")
                plain.append(text)
            if any(m in data for m in ("text/html", "image/svg+xml", "application/javascript")):
                parts.append("<i>(an HTML or script output of the candidate is not shown here)</i>")
    body = "".join(parts) or "<i>(no output)</i>"
    return {"text/html": "<div class='jp-DataAgent-preview'><b>Output preview (ran in a kernel "
                         f"copy; your kernel is unchanged)</b>{body}</div>",
            "text/plain": "\n".join(plain) or "(no output)"}


@contextlib.contextmanager
def quiet_loading():
    """Keep library progress bars and warnings out of the user's cell output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:
            yield
            return
        was_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if was_enabled:
                hf_logging.enable_progress_bar()


@magics_class
class AgentMagics(Magics):
    """``%%agent`` turns an intent into a suggested code cell."""

    @line_cell_magic
    @magic_arguments()
    @argument("--samples", "-n", type=int, default=1, help="Candidates to sample (>1: vote).")
    @argument("--strategy", "-s", default=None, help="direct, vote, react or mcts.")
    @argument("--temperature", "-t", type=float, default=None, help="Sampling temperature.")
    @argument("--model", "-m", default=None, help="Model id, directory or GGUF file.")
    @argument("--budget", type=int, default=None, help="Search budget (iterations) for mcts.")
    @argument("--no-exemplars", action="store_true", help="Leave few-shot exemplars out.")
    @argument("--no-exec", action="store_true", help="Do not run candidates in a kernel copy.")
    @argument("command", nargs="*", help="`config` (line magic only).")
    def agent(self, line: str = "", cell: str | None = None):
        try:
            args = parse_argstring(self.agent, line)
        except Exception as error:  # argparse errors: show usage, not a traceback
            _fail(f"{error}\n{USAGE}")
            return None
        try:
            if cell is None:
                return self._line(args)
            return self._cell(args, cell)
        except (AgentError, BackendError, ValueError) as error:
            _fail(str(error))
        except KeyboardInterrupt:
            _fail("interrupted; no cell was inserted and your kernel state is unchanged.")
        return None

    # -- line magic --------------------------------------------------------
    def _line(self, args) -> None:
        if args.command[:1] == ["config"]:
            from .llm.factory import describe

            settings = resolve_settings()
            if args.model:
                settings = settings.with_overrides(model=args.model)
            print(describe(settings))
            return
        print(USAGE)

    # -- cell magic --------------------------------------------------------
    def _cell(self, args, cell: str) -> None:
        from .context.notebook import from_history
        from .kernel.schema import inspect_namespace, schema_block
        from .llm.factory import create_backend
        from .search import RunContext, TurnRequest, get_strategy

        intent = cell.strip()
        if not intent:
            raise AgentError(
                "the cell has no intent. Write what you want under %%agent, e.g.\n"
                "%%agent\nWhich 5 airlines have the longest average delay?"
            )
        if args.samples < 1:
            raise AgentError("--samples must be at least 1.")
        settings = resolve_settings()
        if args.model:
            settings = settings.with_overrides(model=args.model)
        strategy = get_strategy(args.strategy or ("vote" if args.samples > 1 else "direct"))

        shell = self.shell
        ns = shell.user_ns
        context = from_history(ns.get("In", []), ns.get("Out", {}), -1)
        schema = schema_block(inspect_namespace(ns))

        status = display(Markdown("_jupyter-data-agent: loading the model…_"), display_id=True)

        def progress(event) -> None:
            if event.kind == "progress" and status is not None:
                status.update(Markdown(f"_jupyter-data-agent: {event.message}…_"))

        with quiet_loading():
            backend = create_backend(settings)
        tree, unavailable = (None, "--no-exec was given") if args.no_exec else self._open_copies(settings)
        confinement = decide(tree.protections if tree is not None else None,
                             settings.confinement, unavailable)
        if tree is not None and not confinement.execute:
            tree.close()
            tree = None
        try:
            ctx = RunContext(
                backend=backend,
                executor=tree.root if tree is not None else None,
                events=progress,
                cancel=threading.Event(),
                protections=getattr(tree, "protections", None),
            )
            request = TurnRequest(
                intent=intent,
                context=context,
                schema=schema,
                samples=args.samples,
                temperature=args.temperature,
                max_new_tokens=settings.max_new_tokens,
                exemplars=settings.exemplars and not args.no_exemplars,
                budget=args.budget,
                options={"max_prompt_tokens": settings.max_prompt_tokens, "api_mode": settings.api_mode},
            )
            result = strategy.run(request, ctx)
        finally:
            if tree is not None:
                tree.close()
        if status is not None:
            status.update(Markdown(self._summary(result) + "\n\n" + confinement.line()))
        chosen = result.chosen
        explanation = "\n".join(
            f"{i}. {s.explanation}" for i, s in enumerate(chosen.steps, 1) if s.explanation
        )
        display(Markdown(f"**Plan**\n\n{explanation}" if explanation else "**Suggested cell below.**"))
        if result.answer:
            display(Markdown(f"**Answer:** {result.answer}"))
        preview = preview_bundle(chosen)
        if preview:
            display(preview, raw=True)
        shell.set_next_input(chosen.code, replace=False)

    @staticmethod
    def _summary(result) -> str:
        s = result.stats
        chosen = result.chosen
        parts = [f"**jupyter-data-agent** ({result.strategy})"]
        if len(result.candidates) > 1:
            parts.append(f"{len(result.candidates)} candidates, chosen with {chosen.support} vote(s)")
        parts.append(f"{s.model_calls} model call(s), {s.completion_tokens} tokens, {s.wall_time_s:.1f} s")
        if chosen.repaired:
            parts.append("repaired after an error")
        return " · ".join(parts)

    def _open_copies(self, settings):
        """(A fork snapshot tree of this kernel, or None; why there is none)."""
        try:
            from .kernel.snapshot import SnapshotTree
        except ImportError as error:
            return None, str(error)
        try:
            return SnapshotTree.from_current_kernel(notebook_dir=os.getcwd(),
                                                    wipe=[settings.api_key]), ""
        except Exception as error:  # fork refused, no POSIX...: generate without previews
            return None, f"no kernel copy could be made ({error})"
