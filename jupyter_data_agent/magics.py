"""``%%agent``: ask for a cell from inside a notebook.

Context comes from the kernel's own history (``In``/``Out``) and namespace,
candidates run in forked copies of this very kernel, and the chosen code is
put in a new cell below with ``set_next_input`` — never executed here. In a
kernel started by a Jupyter server with this extension the server runs the
turn (``remote_turn``: one model for every kernel, the turn in the sidebar's
history); elsewhere (IPython, a plain ipykernel) the turn runs in the kernel.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import TYPE_CHECKING

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from pydantic import ValidationError

from .llm.base import BackendError
from .render import escape, preview_bundle, text_bundle
from .search.options import short_errors
from .search.registry import names
from .turn.resolve import load_settings

if TYPE_CHECKING:
    from .kernel.results import Limits

USAGE = f"""\
Usage:
  %%agent [--strategy {'|'.join(names("magic"))}] [--analysis] [--samples N]
         [--budget N] [--temperature T] [--model M] [--no-exemplars] [--no-exec]
  <what you want, in plain words>

  --analysis (= --strategy analysis): a plan of steps, each a cell run in a copy chained on the
  previous step's; every step is shown with its output, and the whole analysis goes into the
  next cell (one "# Step N:" block per step), not run in this kernel.

  Defaults come from c.DataAgent.* (temperature, strategy_defaults...), as in the sidebar.

  %agent config      show the active backend and model
"""


class AgentError(Exception):
    """A problem the user can fix; shown as one line, without a traceback."""


def _fail(message: str) -> None:
    print(f"jupyter-data-agent: {message}", file=sys.stderr)


def _status(text: str) -> dict[str, str]:
    """A progress line as escaped HTML (strategy messages may quote model text)."""
    return {"text/html": f"<i>jupyter-data-agent: {escape(text)}…</i>",
            "text/plain": f"jupyter-data-agent: {text}…"}


_NO_BARS = "HF_HUB_DISABLE_PROGRESS_BARS"


@contextlib.contextmanager
def quiet_loading():
    """Keep library progress bars and warnings out of the user's cell output.

    Imports nothing: a kernel whose model lives in the server must not load
    transformers just to silence it. Not yet imported, transformers and the
    hub read ``HF_HUB_DISABLE_PROGRESS_BARS`` when a local model loads them.
    """
    with warnings.catch_warnings(), contextlib.ExitStack() as undo:
        warnings.simplefilter("ignore")
        hf_logging = sys.modules.get("transformers.utils.logging")
        if hf_logging is None:
            before = os.environ.get(_NO_BARS)
            os.environ[_NO_BARS] = "1"
            if before is None:
                undo.callback(os.environ.pop, _NO_BARS, None)
            else:
                undo.callback(os.environ.__setitem__, _NO_BARS, before)
        elif hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            undo.callback(hf_logging.enable_progress_bar)
        yield


def _settings(args):
    """The configured settings, with the model ``--model`` names."""
    settings = load_settings()
    return settings.with_overrides(model=args.model) if args.model else settings


#: The error each failed cell raised, by execution count: the magic's context has
#: no cell outputs, and "fix the error above" needs the error in the prompt.
CELL_ERRORS: dict[int, BaseException] = {}


def record_errors(result) -> None:
    """``post_run_cell`` hook: remember the exception of a cell that raised."""
    error = result.error_in_exec or result.error_before_exec
    count = result.execution_count
    if error is not None and count is not None:
        CELL_ERRORS[count] = error
        while len(CELL_ERRORS) > 50:
            CELL_ERRORS.pop(min(CELL_ERRORS))


@magics_class
class AgentMagics(Magics):
    """``%%agent`` turns an intent into a suggested code cell."""

    #: Bounds and layers of this kernel's copies; None means the defaults. Tests
    #: set it (``get_ipython().magics_manager.registry['AgentMagics'].limits``)
    #: to force a layer off and check the confinement policy.
    limits: Limits | None = None

    @line_cell_magic
    @magic_arguments()
    @argument("--samples", "-n", type=int, default=None, help="Candidates to sample (>1: vote).")
    @argument("--strategy", "-s", default=None, help=", ".join(names("magic")) + ".")
    @argument("--analysis", action="store_true", help="A whole analysis: --strategy analysis.")
    @argument("--temperature", "-t", type=float, default=None, help="Sampling temperature.")
    @argument("--model", "-m", default=None, help="Model id, directory or GGUF file.")
    @argument("--budget", type=int, default=None, help="Search budget (iterations) for mcts.")
    @argument("--no-exemplars", action="store_true", help="Leave few-shot exemplars out.")
    @argument("--no-exec", action="store_true", help="Do not run candidates in a kernel copy.")
    @argument("command", nargs="*", help="`config` (line magic only).")
    def agent(self, line: str = "", cell: str | None = None):
        try:
            args = parse_argstring(self.agent, line)
        except Exception as error:  # noqa: BLE001 -- argparse errors (and its SystemExit wrapper): usage, not a traceback
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

            print(describe(_settings(args)))
            return
        print(USAGE)

    # -- cell magic --------------------------------------------------------
    def _cell(self, args, cell: str) -> None:
        from .context.notebook import from_history
        from .llm.remote_backend import service_address
        from .turn import TurnAsk, secrets_scrubber

        intent = cell.strip()
        if not intent:
            raise AgentError(
                "the cell has no intent. Write what you want under %%agent, e.g.\n"
                "%%agent\nWhich 5 airlines have the longest average delay?"
            )
        settings = _settings(args)
        if args.analysis and args.strategy not in (None, "analysis"):
            raise AgentError(f"--analysis and --strategy {args.strategy} ask for two strategies; give one.")
        try:
            ask = TurnAsk(intent=intent, strategy="analysis" if args.analysis else args.strategy, samples=args.samples,
                          budget=args.budget, temperature=args.temperature,
                          exemplars=False if args.no_exemplars else None,
                          execute=not args.no_exec, no_exec_reason="--no-exec was given")
        except ValidationError as error:
            raise AgentError(short_errors(error, prefix="--")) from None

        ns = self.shell.user_ns
        context = from_history(ns.get("In", []), ns.get("Out", {}), -1, errors=CELL_ERRORS)
        status = display(_status("loading the model"), raw=True, display_id=True)

        def say(message: str) -> None:
            if status is not None:
                status.update(_status(message), raw=True)

        # A kernel of a Jupyter server with this extension: the server runs the turn (listed in
        # the sidebar, one model for all) with copies of this kernel; else it runs here.
        address = service_address() if settings.extra.get("model_service", True) and self.limits is None else None
        if address is not None:
            from . import remote_turn

            report = remote_turn.run(
                address, ask=ask, context=context, notebook_dir=os.getcwd(),
                overrides={"model": args.model} if args.model else {},
                evaluate=lambda code: self.shell.user_expressions({"r": code})["r"],
                on_event=lambda e: say(str(e["message"])) if e["type"] == "progress" and e["message"] else None)
            if report.status != "done":
                raise AgentError(f"{report.message} No cell was inserted and your kernel state is unchanged.")
        else:
            report = self._in_process(settings, ask, context, say)
        self._show(report, secrets_scrubber(settings.api_key), status)

    def _in_process(self, settings, ask, context, say):
        """The whole turn in this kernel: its model (or the server's), copies forked here."""
        from .kernel.host.handle import NamespaceHandle
        from .llm.factory import create_backend
        from .turn import prepare, resolve, run_turn, secrets_scrubber
        from .turn.report import TurnReport

        spec = resolve(settings, ask)
        with quiet_loading():
            backend = create_backend(settings)
        scrub = secrets_scrubber(settings.api_key)
        # "@df" in the cell: df in full, first; copies forked from this kernel, the API key wiped.
        handle = NamespaceHandle(self.shell.user_ns, notebook_dir=os.getcwd(), wipe=[settings.api_key],
                                 limits=self.limits)
        inputs = prepare(spec, context, handle, redact=scrub.json)
        copies = inputs.copies
        result = None
        try:
            result = run_turn(spec, inputs.context, backend, schema=inputs.schema,
                              schema_cuts=inputs.schema_cuts, copies=copies,
                              events=lambda e: say(str(e.message)) if e.kind == "progress" else None)
        finally:
            if result is not None and result.chain is not None:
                result.chain.close()  # no review here: the steps' copies end with the turn
            copies.close()
        result.stats.transport = inputs.transport
        return TurnReport.of_result(result.to_json(), copies.confinement.to_json())

    def _show(self, report, scrub, status) -> None:
        """The turn's outcome under the cell, and its code in the next cell (never run here).

        Everything is shown as escaped text: step explanations and the answer are
        model-written, like the candidate's code and output; and scrubbed like every
        event the server sends.
        """
        from .kernel.host.policy import Confinement

        confinement = Confinement.from_json(report.confinement)
        notes = [] if report.strategy == "explain" or confinement is None else [confinement.line()]
        summary = scrub.json(text_bundle(self._summary(report), notes))
        if status is not None:
            status.update(summary, raw=True)
        else:
            display(summary, raw=True)
        chosen = report.chosen_candidate
        if chosen is not None and chosen.get("analysis"):
            self._show_analysis(chosen, scrub)
            if chosen.get("code"):
                self.shell.set_next_input(scrub.text(chosen["code"]), replace=False)
            return
        if chosen is not None:
            plan = [f"{i}. {s['explanation']}" for i, s in enumerate(chosen.get("steps") or [], 1)
                    if s.get("explanation")]
            display(scrub.json(text_bundle("Plan" if plan else "Suggested cell below.", plan)),
                    raw=True)
        if report.answer:
            display(scrub.json(text_bundle("Answer", [str(report.answer)])), raw=True)
        if chosen is not None:
            preview = preview_bundle(report.run(report.chosen))
            if preview:
                display(scrub.json(preview), raw=True)
            self.shell.set_next_input(scrub.text(chosen["code"]), replace=False)

    @staticmethod
    def _show_analysis(chosen: dict, scrub) -> None:
        """Each step: its title, explanation and status, then what it printed in its copy."""
        from .kernel.results import ExecResult

        for step in chosen["analysis"]:
            where = f" (a new source for cell {step['cell_id']}: not applied here)" if step.get("cell_id") else ""
            lines = [step["explanation"]] if step.get("explanation") else []
            if step.get("status") != "ok":
                lines.append(f"status: {step.get('status')}")
            if step.get("cell_id"):
                lines.append(step["code"])
            display(scrub.json(text_bundle(f"Step {step['number']}: {step['title']}{where}", lines)), raw=True)
            preview = preview_bundle(ExecResult.from_json(step["result"]) if step.get("result") else None)
            if preview:
                display(scrub.json(preview), raw=True)

    @staticmethod
    def _summary(report) -> str:
        from pydantic import TypeAdapter

        from .context.report import ContextReport

        s = report.stats
        chosen = report.chosen_candidate
        parts = [f"jupyter-data-agent ({report.strategy})"]
        if len(report.candidates) > 1 and chosen is not None:
            line = f"{len(report.candidates)} candidates, chosen with {report.support_of(report.chosen)} vote(s)"
            if len(report.classes) > 1:
                line += f" (classes {', '.join(map(str, report.classes))})"
            parts.append(line)
        parts.append(f"{s.get('model_calls', 0)} model call(s), {s.get('completion_tokens', 0)} tokens, "
                     f"{float(s.get('wall_time_s') or 0):.1f} s")
        if chosen is not None and chosen.get("repaired"):
            parts.append("repaired after an error")
        if s.get("estimator"):
            parts.append(f"guided by {s['estimator']}")
        if s.get("context"):
            parts.append(TypeAdapter(ContextReport).validate_python(s["context"]).line())
        return " · ".join(parts)
