"""The accept/reject -> store -> train -> served loop, measured: ``jupyter-data-agent-bench loop``.

1. **Serve**: the simulated policy (``bench.policy``, one per task, per-step
   accuracy ``p``) behind the OpenAI protocol (``bench.model_server``), and a
   real Jupyter server (a subprocess) with this extension using it, its
   Jupyter data directory a fresh folder under ``--out`` (so the decisions
   store and the value models are this run's).
2. **Record**: on the train split, a Search (``mcts``) turn per task through
   the server API, in a real kernel started by ``POST /api/kernels`` next to
   the task's table; the simulated user accepts every candidate whose answer
   scores 1 and rejects the others (``POST decisions``): the server writes
   them to its store with the turn's prompt, steps, outputs and the answer
   node's features (what the evidence estimator read).
3. **Test turns**: the same on the test split, nothing recorded; each
   candidate is kept with its label, its features and the value that guided
   the search to it.
4. **Train**: ``train-value`` on the store, written as the next version in
   the data dir. ``--kind features`` (default): the evidence estimator, from
   ``--init`` (default ``evidence``, the shipped model) with an L2 prior
   centred on it; ``--kind lm``: the LM value model (``--init`` the model
   trained on trajectories, when given).
5. **Serve the new model**: ``POST value-model/reload`` must name it, and one
   more Search turn says it guided the search.
6. **Rank**: AUC of right vs wrong test candidates (all of them, and those
   with a final answer) under the heuristic, the search's own value, the
   model before and the model after training on decisions; the evidence
   models score the features the test turns recorded.

The policy answers through the OpenAI protocol, whose test server gives
every token the same log-prob: in the loop log-probs carry no information
(as the lab's ``--logprob-gap 0``). Measurement only; the lab (``bench lab
--value-model before=DIR --value-model after=DIR``) gives the accuracy of
``mcts`` with each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_data_agent.llm.base import ChatMessage, Prompt, SamplingParams
from jupyter_data_agent.store.value_models import newest_value_model
from jupyter_data_agent.train.features import auc as ranking_auc
from jupyter_data_agent.train.features import load_init

from .dabench import load_tasks, task_text
from .dabench_score import dabench_reward
from .lab import MCTS_K, split_of
from .policy import PolicyConfig, SimulatedPolicy, table_columns
from .references import load_references
from .runner_common import write_json

if TYPE_CHECKING:
    from .model_server import RecordedRequest

NS = "jupyter-data-agent"
MODEL = "simulated-policy"


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """P(score of a right candidate > score of a wrong one), ties counting half (Mann-Whitney)."""
    return ranking_auc(positives + negatives, [1] * len(positives) + [0] * len(negatives))


# ------------------------------------------------------------------ the model endpoint

class PolicyRouter:
    """One simulated policy per task; a request goes to the task whose question it holds."""

    def __init__(self, policies: dict[str, SimulatedPolicy]) -> None:
        self.policies = policies  # question text -> policy

    def __call__(self, req: RecordedRequest) -> list[str]:
        body = req.body
        messages = [ChatMessage(m.get("role", "user"), str(m.get("content") or ""))
                    for m in body.get("messages") or [{"role": "user", "content": body.get("prompt", "")}]]
        text = "\n".join(m.content for m in messages)
        found = [q for q in self.policies if q in text]
        if not found:
            return [""]
        policy = self.policies[max(found, key=len)]
        n = int(body.get("n") or 1)
        params = SamplingParams(n=n, temperature=float(body.get("temperature") or 0.0))
        return [c.text for c in policy.generate(Prompt.chat(messages), params)]


# ------------------------------------------------------------------ the Jupyter server

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: Seconds of one ``wait_for_ready`` between two looks at whether the kernel died.
READY_STEP_S = 5.0


def ready_client(connection_file: Path | str, timeout: float = 300.0,
                 died: Callable[[], str | None] | None = None):
    """A client of one of the server's kernels, by its connection file, once it answers ``kernel_info``.

    Without the heartbeat channel: for a client not made by a KernelManager,
    jupyter_client's ``wait_for_ready`` judges the kernel by its heartbeat, and a
    kernel stalled past a second (a loaded machine, a kernel still importing) is
    called dead ("Kernel died before replying to kernel_info") a moment before it
    answers. Whether it died is asked of ``died`` instead (the reason, or None
    while it lives: ``JupyterServer.kernel_died`` asks the server), between waits of
    ``READY_STEP_S``, so a real death is said at once; a kernel that lives but
    never answers is given up on, in words, after ``timeout`` (generous: a loaded
    machine takes a while)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels(hb=False)
    deadline = time.monotonic() + timeout
    try:
        while True:
            step = max(1.0, min(READY_STEP_S, deadline - time.monotonic()))
            try:
                client.wait_for_ready(timeout=step)
                return client
            except RuntimeError:  # without the heartbeat, only "didn't respond in <step> seconds"
                pass
            why = died() if died is not None else None
            if why:
                raise RuntimeError(f"the kernel died before it answered kernel_info: {why} ({connection_file})")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the kernel did not respond to kernel_info within {timeout:.0f} s, "
                                   f"though not reported dead ({connection_file})")
    except BaseException:
        client.stop_channels()
        raise


@dataclass
class JupyterServer:
    """A real ``jupyter server`` subprocess with this extension; a tiny authenticated client."""

    root: Path
    data_dir: Path
    model_url: str
    log_path: Path
    port: int = field(default_factory=_free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen | None = None
    runtime_dir: Path | None = None  # JUPYTER_RUNTIME_DIR: where its kernels' connection files go
    # The extension's settings; None: the simulated policy at ``model_url`` (OpenAI protocol).
    agent_args: list[str] | None = None
    confinement: str | None = None  # None: $JDA_LOOP_CONFINEMENT, else "warn" (the loop measures ranking)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> "JupyterServer":
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER_DATA_AGENT_", "OPENAI_"))}
        env.update(JUPYTER_DATA_DIR=str(self.data_dir), OPENAI_API_KEY="unused",
                   JUPYTER_DATA_AGENT_CONFINEMENT=self.confinement or env.get("JDA_LOOP_CONFINEMENT", "warn"))
        if self.runtime_dir is not None:
            env["JUPYTER_RUNTIME_DIR"] = str(self.runtime_dir)
        agent = self.agent_args if self.agent_args is not None else [
            "--DataAgent.backend=openai", f"--DataAgent.base_url={self.model_url}",
            f"--DataAgent.model={MODEL}", "--DataAgent.max_retries=0"]
        cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
               f"--port={self.port}", "--port-retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.jpserver_extensions={'jupyter_data_agent': True}",
               *agent]
        self.log = open(self.log_path, "ab")  # open while the server runs
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited ({self.proc.returncode}); see {self.log_path}")
            try:
                self.call("GET", "api/status")
                return self
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        raise TimeoutError(f"jupyter server did not answer within {timeout:.0f} s; see {self.log_path}")

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 60.0) -> Any:
        data = json.dumps(body).encode() if body is not None else (b"" if method in ("POST", "PUT") else None)
        req = urllib.request.Request(f"{self.url}/{path}", data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def kernel_died(self, kernel_id: str) -> str | None:
        """Why one of this server's kernels is gone, by the server's account; None: it lives
        (or the server is too busy to say: the caller waits on)."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"jupyter server exited ({self.proc.returncode}); see {self.log_path}"
        try:
            state = self.call("GET", f"api/kernels/{kernel_id}", timeout=10)["execution_state"]
        except urllib.error.HTTPError as exc:
            return f"the server has no kernel {kernel_id} (HTTP {exc.code})" if exc.code == 404 else None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        return f"the server says kernel {kernel_id} is {state}" if state == "dead" else None

    def kernel_client(self, kernel_id: str, timeout: float = 300.0):
        """A ZMQ client of one of this server's kernels once it answers (``ready_client``)."""
        assert self.runtime_dir is not None, "set runtime_dir: the kernels' connection files go there"
        return ready_client(self.runtime_dir / f"kernel-{kernel_id}.json", timeout,
                            died=lambda: self.kernel_died(kernel_id))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if getattr(self, "log", None):
            self.log.close()

    # -- one Search turn in a fresh kernel -------------------------------------------
    def search_turn(self, intent: str, budget: int, timeout: float = 600.0) -> dict:
        """(done event's data, candidates) of an ``mcts`` turn; the kernel is shut down after."""
        kernel = self.call("POST", "api/kernels", {"name": "python3"})
        try:  # the turn waits for the kernel to answer (as for a user's fresh kernel)
            accepted = self.call("POST", f"{NS}/turns", {
                "version": 1, "notebook_path": "loop.ipynb", "cells": [], "kernel_id": kernel["id"],
                "intent": intent, "strategy": "mcts", "options": {"budget": budget}})
            events, after = [], 0
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                reply = self.call("GET", f"{NS}/jobs/{accepted['job_id']}?after={after}")
                events += reply["events"]
                after = events[-1]["seq"] if events else after
                if reply["status"] != "running":
                    break
                time.sleep(0.3)
            last = events[-1] if events else {"type": "none", "data": {}}
            candidates = {e["data"]["index"]: e["data"]["candidate"] for e in events if e["type"] == "candidate"}
            return {"turn_id": accepted["turn_id"], "status": last["type"], "done": last.get("data") or {},
                    "message": last.get("message", ""), "candidates": [candidates[i] for i in sorted(candidates)]}
        finally:
            with contextlib.suppress(urllib.error.URLError, ConnectionError):  # the server may be gone
                self.call("DELETE", f"api/kernels/{kernel['id']}")


# ------------------------------------------------------------------ the loop

def _candidate_rows(task: dict, labels, turn: dict) -> list[dict]:
    reward = dabench_reward(labels, task["id"])
    estimator = ((turn.get("done") or {}).get("result") or {}).get("stats", {}).get("estimator")
    rows = []
    for i, c in enumerate(turn["candidates"]):
        meta = c.get("meta") or {}
        rows.append({"id": task["id"], "index": i, "right": reward(meta.get("answer")) > 0,
                     "answered": meta.get("reason") == "answer", "value": meta.get("value"), "q": meta.get("q"),
                     "estimator": estimator, "features": meta.get("features"), "messages": meta.get("messages") or []})
    return rows


def _scores(kind: str, model: str | None, rows: list[dict]) -> list[float] | None:
    """Each row's score under a model: an evidence model (``evidence`` or a version) reads the
    features the turn recorded; an LM value model reads the path's messages."""
    if not model:
        return None
    if kind == "features":
        return load_init(model).probability([r["features"] or {} for r in rows]).tolist()
    from jupyter_data_agent.search.value_net import ValueModel

    return ValueModel.load(model).predict([r["messages"] for r in rows])


def ranking(rows: list[dict], scores: list[float]) -> float | None:
    return auc([s for r, s in zip(rows, scores) if r["right"]], [s for r, s in zip(rows, scores) if not r["right"]])


def rankings(rows: list[dict], ranked: dict[str, list[float]]) -> dict[str, dict[str, float | None]]:
    """AUC under each score, among all candidates and among those with a final answer."""
    answered = [i for i, r in enumerate(rows) if r["answered"]]
    return {name: {"all": ranking(rows, s),
                   "answered": ranking([rows[i] for i in answered], [s[i] for i in answered])}
            for name, s in ranked.items()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="the DABench folder")
    p.add_argument("--references", default=None, help="reference solutions JSONL (bench.references)")
    p.add_argument("--p", type=float, default=0.5, help="per-step accuracy of the simulated policy")
    p.add_argument("--budget-calls", type=int, default=24, help="completions per Search turn")
    p.add_argument("--train-limit", type=int, default=20, help="train-split tasks the user decides on")
    p.add_argument("--test-limit", type=int, default=20, help="test-split tasks whose candidates are ranked")
    p.add_argument("--kind", choices=("features", "lm"), default="features",
                   help="what train-value trains on the decisions: the evidence estimator (default) or "
                        "the LM value model")
    p.add_argument("--init", default=None, metavar="DIR",
                   help="the model before decisions, train-value --init: --kind features: 'evidence' (the "
                        "shipped default, the default) or a trained version; --kind lm: a value model "
                        "trained on trajectories (none: from --base)")
    p.add_argument("--l2", type=float, default=None, help="--kind features: train-value --l2")
    p.add_argument("--base", default=None, help="--kind lm: train-value --base when there is no --init "
                   "(default: the embedded model)")
    p.add_argument("--max-steps", type=int, default=40, help="--kind lm: train-value steps on the decisions")
    p.add_argument("--max-length", type=int, default=512, help="--kind lm")
    p.add_argument("--lr", type=float, default=3e-4, help="--kind lm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="result folder (replaced)")


def main(args: argparse.Namespace) -> int:
    from jupyter_data_agent.train import cli as train_cli

    data, out = Path(args.data), Path(args.out).resolve()  # the server runs in out/workspace
    init = args.init or ("evidence" if args.kind == "features" else None)
    shutil.rmtree(out, ignore_errors=True)
    root, data_dir = out / "workspace", out / "jupyter-data"
    root.mkdir(parents=True)
    data_dir.mkdir()
    tasks, labels = load_tasks(data)
    refs = load_references(args.references)
    usable = [t for t in tasks if int(t["id"]) in refs and labels.get(t["id"])]
    train = [t for t in usable if split_of(t["id"]) == "train"][: args.train_limit]
    test = [t for t in usable if split_of(t["id"]) == "test"][: args.test_limit]
    policies = {}
    for t in train + test:
        shutil.copy(data / "tables" / t["file_name"], root / t["file_name"])
        policies[t["question"].strip()] = SimulatedPolicy(
            refs[int(t["id"])], PolicyConfig(p=args.p, seed=args.seed),
            table_columns(data / "tables" / t["file_name"]))
    budget = max(1, args.budget_calls // MCTS_K)
    report: dict[str, Any] = {"p": args.p, "budget_calls": args.budget_calls, "train": [t["id"] for t in train],
                              "test": [t["id"] for t in test], "kind": args.kind, "init": init}
    started = time.perf_counter()
    from .model_server import OpenAITestServer  # the checkout's tests/ (see model_server)

    with OpenAITestServer(PolicyRouter(policies), models=[MODEL]) as model:
        server = JupyterServer(root, data_dir, model.base_url, out / "server.log").start()
        try:
            decisions = []
            for i, t in enumerate(train, 1):
                t0 = time.perf_counter()
                turn = server.search_turn(task_text(t), budget)
                for row in _candidate_rows(t, labels[t["id"]], turn):
                    decision = "accepted" if row["right"] else "rejected"
                    reply = server.call("POST", f"{NS}/decisions", {
                        "version": 1, "turn_id": turn["turn_id"], "candidate": row["index"], "decision": decision})
                    decisions.append({"id": t["id"], "decision": decision, "complete": reply.get("complete")})
                print(f"train {i}/{len(train)}: task {t['id']}: {turn['status']}, "
                      f"{len(turn['candidates'])} candidates, {time.perf_counter() - t0:.1f} s", flush=True)
            rows = []
            for i, t in enumerate(test, 1):
                t0 = time.perf_counter()
                turn = server.search_turn(task_text(t), budget)
                rows += _candidate_rows(t, labels[t["id"]], turn)
                print(f"test {i}/{len(test)}: task {t['id']}: {turn['status']}, "
                      f"{len(turn['candidates'])} candidates, {time.perf_counter() - t0:.1f} s", flush=True)
            store = data_dir / "jupyter_data_agent" / "decisions.sqlite"
            report["decisions"] = {"rows": len(decisions),
                                   "accepted": sum(d["decision"] == "accepted" for d in decisions),
                                   "complete": sum(bool(d["complete"]) for d in decisions), "store": str(store)}
            t0 = time.perf_counter()
            argv = ["--kind", args.kind, "-t", str(store), "--seed", str(args.seed)]
            if args.kind == "features":
                argv += ["--init", init] + (["--l2", str(args.l2)] if args.l2 is not None else [])
            else:
                argv += ["--max-steps", str(args.max_steps), "--max-length", str(args.max_length),
                         "--lr", str(args.lr), "--save-every", "0"]
                argv += ["--init", init] if init else (["--base", args.base] if args.base else [])
            saved = os.environ.get("JUPYTER_DATA_DIR")
            os.environ["JUPYTER_DATA_DIR"] = str(data_dir)  # train-value writes the next version there
            try:
                if train_cli.main(argv) != 0:
                    raise RuntimeError("train-value failed")
            finally:
                if saved is None:
                    os.environ.pop("JUPYTER_DATA_DIR", None)
                else:
                    os.environ["JUPYTER_DATA_DIR"] = saved
            report["train_s"] = round(time.perf_counter() - t0, 1)
            served = server.call("POST", f"{NS}/value-model/reload", {})["value_model"]
            after = str(newest_value_model(data_dir / "jupyter_data_agent" / "value_models"))
            report["served_after_reload"] = served
            check = server.search_turn(task_text(test[0]), 1) if test else None
            report["estimator_of_next_turn"] = ((check or {}).get("done", {}).get("result") or {}).get(
                "stats", {}).get("estimator")
        finally:
            server.stop()
    report["after"] = after
    guide = sorted({str(r["estimator"]) for r in rows}) or ["?"]
    ranked = {"heuristic": [(r["features"] or {}).get("heuristic", 0.0) for r in rows],
              f"search value ({', '.join(guide)})": [r["value"] if r["value"] is not None else 0.0 for r in rows],
              "search Q (MCTS)": [r["q"] if r["q"] is not None else 0.0 for r in rows]}
    model_name = "evidence" if args.kind == "features" else "value model"
    for name, model_dir in ((f"{model_name} before ({init})", init), (f"{model_name} after (+ decisions)", after)):
        scores = _scores(args.kind, model_dir, rows)
        if scores is not None:
            ranked[name] = scores
    report["candidates"] = {"total": len(rows), "right": sum(r["right"] for r in rows),
                            "answered": sum(r["answered"] for r in rows),
                            "answered_right": sum(r["right"] and r["answered"] for r in rows),
                            "with_features": sum(bool(r["features"]) for r in rows)}
    report["auc"] = rankings(rows, ranked)
    report["wall_time_s"] = round(time.perf_counter() - started, 1)
    write_json(out / "loop.json", report)
    with open(out / "candidates.jsonl", "w", encoding="utf-8") as f:
        for r, *s in zip(rows, *ranked.values()):
            f.write(json.dumps({k: v for k, v in r.items() if k != "messages"} | dict(zip(ranked, s))) + "\n")
    c = report["candidates"]

    def fmt(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    lines = [f"Loop at p = {args.p:g}: {report['decisions']['rows']} decisions on {len(train)} train tasks "
             f"({report['decisions']['accepted']} accepted), trained {args.kind} in {report['train_s']} s, "
             f"served after reload: {served}", "",
             f"AUC of right vs wrong candidates on {len(test)} test tasks ({c['right']} right of {c['total']}; "
             f"{c['answered_right']} right of the {c['answered']} with a final answer):", "",
             "| ranked by | all candidates | with a final answer |", "|---|---|---|"]
    lines += [f"| {k} | {fmt(v['all'])} | {fmt(v['answered'])} |" for k, v in report["auc"].items()]
    md = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
