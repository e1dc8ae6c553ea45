"""``mcts``: JUPITER's value-guided tree search over notebook states.

Node = the notebook state after a path of thought + code cells, held by a
snapshot process (a fork of its parent's process, so siblings never see each
other's changes and no cell is ever re-run). One iteration (Algorithm 1):

1. select: from the root, descend to the child with the highest PUCT score
   ``Q + c_puct * P * sqrt(N_parent) / (1 + N)`` until an unexpanded node;
   terminal and exhausted (every child terminal) children are skipped;
2. expand: one ``n=K`` model call gives K thought+action candidates; actions
   run in parallel, each in a fresh child snapshot (a thread pool of
   ``min(K, cpu_count)``); answers run nothing, nor do invalid replies
   (neither code nor answer), which count as errors on their path and show
   the model the expected format, as in ``react``. Samples that propose the
   same step (the same code, the same answer; ``tree_nodes.step_key``) are
   one node (``merge``, on by default) that counts them: one copy and one
   run, its prior the sum of theirs, its answer voting once per sample, and
   its share of the expansion's samples kept as evidence (step-level
   self-consistency: a confident policy makes a narrow, deep tree, an unsure
   one a wide tree);
3. evaluate: terminal answers get ``reward_fn(answer)`` when one is given
   (trajectory collection), failures (error limit, depth limit)
   get -1, everything else gets the value estimator's value;
4. backpropagate: every new child adds its value to itself and to each
   ancestor (N += 1, W += v), so Q = W / N; each also keeps the best value
   below it. ``backup="max"`` selects by that best value instead of Q: one
   weak child no longer pulls a promising step below its untried siblings,
   so a small budget goes deep enough to reach an answer (the lab's
   failure mode with 8 iterations of k = 3 on 5-6 step tasks).

Defaults follow the paper: K = 3, depth <= 10, <= 40 iterations, <= 3
execution errors per path (the third error ends the path), the K candidates
sampled at ``SamplingPolicy.sample_temperature`` (0.7);
``c_puct`` = 0 at inference (the value estimator leads), 1.25 in collection
mode (a ``reward_fn``) or without an estimator. At inference ``unsure`` > 0
adds the PUCT term scaled by ``1 - |value|``: budget goes to steps whose
estimate is unsure rather than to ones it is sure of, good or bad. The prior P is the softmax of
the candidates' mean token log-probabilities over the siblings (uniform where
the backend reports none).

Every answer is kept. When the search ends, every answer is evaluated
again with the whole tree's evidence (its final agreement and step shares).
The result is the majority answer over equivalent
answers (``majority.majority`` with ``prompts.answers.same_text_answer``; ``select="vote"``,
ties to the higher value) or the answer with
the highest value (``select="value"``). Early stop: as soon as one answer
holds at least ``max(early_stop_votes, early_stop_fraction * answers)``
votes (default: at least 3 votes and at least 2/3 of all answers), more
search cannot change a majority that clear.

Processes (``tree_policy``, with selection): the tree evicts idle leaves,
lowest priority first, when its live-process cap is hit. Terminal nodes and exhausted ones (every child
terminal or exhausted) are never expanded again: they get priority -inf and
go first; every other node's priority is minus the regret of its path under
PUCT, so the leaves selection is least likely to reach go next (an evicted
node is rebuilt by replay if it is selected after all). Every process the
search created is closed when it ends.
Cancelling ends every process this search started; the root (the caller's)
stays.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..kernel.results import ExecResult
from ..prompts import UnparsableOutput
from ..prompts.react import (
    INVALID_OBSERVATION,
    STOP,
    ParsedStep,
    fit_messages,
    format_observation,
    history_messages,
    parse_reply,
    solution_cell,
    to_prompt,
)
from ..words import counted
from . import tree_policy
from .base import (
    Cancelled,
    Candidate,
    Event,
    RunContext,
    SearchResult,
    SearchStats,
    TraceStep,
    TurnRequest,
    copy_failed,
)
from .branching import BranchingSearch
from .estimators import NodeState, ValueEstimator, ZeroValue, clip, resolve_estimator
from .evidence import all_checks, path_checks, probe_copy, type_check
from .features import features
from .generate import jupiter_task, options, prompt_text, result_images, sampling, show_latest_images, turn_chat
from .options import MCTSOptions
from .trajectories import TrajectoryRecord, write_jsonl
from .tree_nodes import AnswerGroup, IterationTiming, Node, group_answers, priors, step_key

log = logging.getLogger(__name__)

RewardFn = Callable[[str | None], float]


class MCTSSearch:
    """One search: the node tree, its processes and its statistics."""

    def __init__(self, request: TurnRequest, ctx: RunContext, cfg: MCTSOptions,
                 estimator: ValueEstimator, reward_fn: RewardFn | None) -> None:
        if ctx.executor is None:
            raise ValueError("The mcts strategy runs every step in a kernel copy, and none is "
                             "available here (--no-exec, or the kernel cannot be forked).")
        self.request, self.ctx, self.cfg = request, ctx, cfg
        self.estimator = estimator
        self.reward_fn = reward_fn
        self.c_puct = cfg.c_puct if cfg.c_puct is not None else (
            1.25 if reward_fn is not None or isinstance(estimator, ZeroValue) else 0.0)
        self.task = jupiter_task(request, ctx.backend)
        self.chat = turn_chat(ctx.backend, request.prompt)
        self.search_id = uuid.uuid4().hex[:12]
        self.root = Node("root", None, 0, snapshot=ctx.executor)
        self.nodes: list[Node] = [self.root]
        self.selections: list[str] = []
        self.timings: list[IterationTiming] = []
        self.stats = SearchStats()
        self.first_prompt = ""
        self.stopped: str | None = None  # why the search ended
        self._ids = 0
        self._created: list[Any] = []
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    # -------------------------------------------------------------- driving

    def run(self) -> SearchResult:
        started = time.monotonic()
        try:
            if self.cfg.probes:
                probe_copy(self.root.snapshot)  # the baseline the first steps' probes compare with
            while True:
                self.ctx.check_cancelled()
                reason = self._budget_spent(started)
                if reason:
                    self.stopped = reason
                    break
                t = IterationTiming()
                t0 = time.perf_counter()
                leaf = self.select()
                t.select = time.perf_counter() - t0
                if leaf is None:
                    self.stopped = "exhausted"
                    break
                self.selections.append(leaf.id)
                children = self.expand(leaf, t)
                t1 = time.perf_counter()
                self.backpropagate(children)
                self._after_expansion(leaf)
                t.backprop = time.perf_counter() - t1
                t.total = time.perf_counter() - t0
                self.timings.append(t)
                self.stats.iterations += 1
                groups = group_answers(self.answer_nodes())
                self._progress(groups, leaf)
                if self._clear_majority(groups):
                    self.stopped = "early_stop"
                    break
            result = self.finish()
            self.stats.wall_time_s = time.monotonic() - started
            if self.cfg.trajectory_path:
                write_jsonl(self.cfg.trajectory_path, self.records())
            return result
        finally:
            self.close()

    def _budget_spent(self, started: float) -> str | None:
        cfg = self.cfg
        if self.stats.iterations >= cfg.iterations:
            return "iterations"
        if cfg.time_budget_s is not None and time.monotonic() - started >= cfg.time_budget_s:
            return "time"
        if cfg.token_budget is not None and (
                self.stats.prompt_tokens + self.stats.completion_tokens >= cfg.token_budget):
            return "tokens"
        return None

    def _clear_majority(self, groups: list[AnswerGroup]) -> bool:
        if not self.cfg.early_stop or not groups:
            return False
        total = sum(g.votes for g in groups)
        need = max(self.cfg.early_stop_votes, self.cfg.early_stop_fraction * total)
        return groups[0].votes >= need

    def _progress(self, groups: list[AnswerGroup], leaf: Node) -> None:
        visited = [n.q for n in self.nodes if n.parent is not None and n.visits]
        best = max(visited) if visited else None
        self.ctx.progress(
            f"search iteration {self.stats.iterations}: {counted(len(self.nodes) - 1, 'node')}, "
            f"{counted(sum(g.votes for g in groups), 'answer', none='no answers')}",
            iterations=self.stats.iterations, nodes=len(self.nodes) - 1,
            best_value=None if best is None else round(best, 4),
            answers=[{"answer": g.answer, "votes": g.votes} for g in groups],
            selected=leaf.id)

    # ------------------------------------------------------------ selection

    def puct(self, child: Node, parent: Node) -> float:
        q = child.best if self.cfg.backup == "max" and child.best is not None else child.q
        explore = self.c_puct
        if not explore and self.cfg.unsure and child.value is not None:
            explore = self.cfg.unsure * (1.0 - abs(child.value))  # explore where the estimate is unsure
        return q + explore * child.prior * math.sqrt(parent.visits) / (1 + child.visits)

    def select(self) -> Node | None:
        return tree_policy.select(self.root, self.puct)

    # ------------------------------------------------------------ expansion

    def messages(self, node: Node) -> list[dict]:
        return history_messages(self.task, [(n.message, n.observation) for n in node.path()])

    def expand(self, leaf: Node, t: IterationTiming) -> list[Node]:
        self.ctx.check_cancelled()
        t0 = time.perf_counter()
        messages = fit_messages(self.messages(leaf), self.ctx.backend.count_tokens,
                                self.request.prompt.max_prompt_tokens)
        images = result_images(leaf.result, self.request, self.ctx.backend)  # the leaf's plots
        prompt = to_prompt(show_latest_images(messages, images), self.chat)
        params = sampling(self.request, self.cfg.k, stop=STOP, seed_offset=self.stats.model_calls,
                          temperature=self.request.sampling.sample_temperature)
        self.first_prompt = self.first_prompt or prompt_text(prompt)
        t1 = time.perf_counter()
        t.prompt = t1 - t0
        completions = self.ctx.backend.generate(prompt, params)
        t.model = time.perf_counter() - t1
        self.stats.count_call(completions)
        self.ctx.check_cancelled()
        children: list[Node] = []
        for c, prior in zip(completions, priors([c.mean_logprob for c in completions])):
            parsed = parse_reply(c.text, self.chat)
            key = step_key(parsed.kind, parsed.code, parsed.answer)
            twin = next((n for n in children if n.key == key), None) if self.cfg.merge else None
            if twin is None:
                children.append(self._new_child(leaf, c.text, c.mean_logprob, parsed, prior, key))
                continue
            # The same step sampled again: one node (one copy, one run) that counts every sample,
            # in its prior, its answer's votes and its share of the samples (evidence).
            twin.samples += 1
            twin.prior += prior
            if c.mean_logprob is not None and twin.mean_logprob is not None:
                twin.mean_logprob += (c.mean_logprob - twin.mean_logprob) / twin.samples
        leaf.children.extend(children)
        t2 = time.perf_counter()
        self._execute(leaf, [c for c in children if c.step.status == "pending"], t)
        t.execute = time.perf_counter() - t2
        t3 = time.perf_counter()
        self._classify(children)
        self._evaluate(children)
        for c in children:
            if c.terminal:
                self._release(c)
        t.evaluate = time.perf_counter() - t3
        t.children = len(children)
        return children

    def _new_child(self, parent: Node, raw: str, logprob: float | None, p: ParsedStep,
                   prior: float, key: tuple = ()) -> Node:
        self._ids += 1
        kind = p.kind
        step = TraceStep(thought=p.thought, code=p.code or "",
                         status={"action": "pending", "answer": "answer"}.get(kind, "invalid"),
                         answer=p.answer if kind == "answer" else None)
        node = Node(f"n{self._ids}", parent, parent.depth + 1, step=step, message=p.message(),
                    prior=prior, mean_logprob=logprob, raw=raw, errors=parent.errors, key=key)
        if kind == "invalid":
            node.observation = step.output = INVALID_OBSERVATION
        self.nodes.append(node)
        return node

    def _pool_for(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            workers = self.cfg.workers or min(self.cfg.k, os.cpu_count() or 1)
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, workers), thread_name_prefix="jda-mcts")
        return self._pool

    def _run_action(self, parent: Node, child: Node) -> ExecResult:
        self.ctx.check_cancelled()
        base = parent
        while base.snapshot is None and base.parent is not None:
            base = base.parent  # an invalid reply ran nothing: its state is its parent's
        snap = base.snapshot.fork()
        with self._lock:
            self._created.append(snap)
        child.snapshot = snap
        self.ctx.check_cancelled()
        result = snap.exec(child.step.code)
        if result.ok and self.cfg.probes:
            child.findings = probe_copy(snap)
        return result

    def _execute(self, parent: Node, children: list[Node], t: IterationTiming) -> None:
        if not children:
            return
        pool = self._pool_for()
        futures = {pool.submit(self._run_action, parent, c): c for c in children}
        pending = set(futures)
        while pending:
            _, pending = concurrent.futures.wait(pending, timeout=0.05)
            if self.ctx.cancel.is_set():
                self._abort(futures)
                raise Cancelled("the search was cancelled")
        for fut, child in futures.items():
            try:
                result = fut.result()
            except Cancelled:
                self._abort(futures)
                raise
            except Exception as e:  # noqa: BLE001 -- a failed fork (capacity, dead parent) is an error on this path, not the end of the search
                result = copy_failed(e)
            self.stats.executions += 1
            t.executed += 1
            t.user_code += result.duration_s
            child.result = result
            child.step.status = result.status if result.status in ("ok", "error", "timeout") \
                else "died"
            child.step.output = format_observation(result, self.cfg.observation_chars)
            child.observation = child.step.output

    def _classify(self, children: list[Node]) -> None:
        for c in children:
            status = c.step.status
            if status == "answer":
                c.terminal, c.reason = True, "answer"
            else:
                if status != "ok":  # error, timeout, died, invalid
                    c.errors += 1
                if c.errors >= self.cfg.max_errors:
                    c.terminal, c.reason = True, "error_limit"
                elif c.depth >= self.cfg.max_depth:
                    c.terminal, c.reason = True, "depth_limit"

    def checks(self, node: Node, groups: list[AnswerGroup] | None = None) -> list:
        """The node's evidence: its path's probes, its answer's type, agreement with the tree's answers."""
        findings = [n.findings for n in node.path()]
        if node.reason != "answer":
            return [*path_checks(findings), type_check(None, self.request.intent, self.task.format)]
        groups = group_answers(self.answer_nodes()) if groups is None else groups
        total = sum(g.votes for g in groups)
        support = next((g.votes for g in groups if node in g.nodes), node.samples)
        leading = support >= max((g.votes for g in groups), default=0)  # a class the vote would pick
        return all_checks(findings, node.answer, self.request.intent, self.task.format, support, total, leading)

    def state(self, node: Node) -> NodeState:
        agreement = None
        if node.reason == "answer":
            groups = group_answers(self.answer_nodes())
            total = sum(g.votes for g in groups)
            agreement = next((g.votes for g in groups if node in g.nodes), node.samples) / max(1, total)
        path = node.path()
        return NodeState(messages=self.messages(node), steps=[n.step for n in path],
                         format=self.task.format, depth=node.depth, checks=self.checks(node),
                         mean_logprob=node.mean_logprob, prior=node.prior, agreement=agreement,
                         shares=[n.share for n in path])

    def _evaluate(self, children: list[Node]) -> None:
        to_estimate = []
        states = {c.id: self.state(c) for c in children}
        for c in children:
            c.features = features(states[c.id])  # kept for the trajectories (train-value --kind features)
            if c.terminal and c.reason != "answer":
                c.value = self.cfg.failure_value
            elif c.reason == "answer" and self.reward_fn is not None:
                c.value = c.reward = float(self.reward_fn(c.answer))
            else:
                to_estimate.append(c)
        if to_estimate:
            values = self.estimator.estimate([states[c.id] for c in to_estimate], self.stats)
            for c, v in zip(to_estimate, values):
                c.value = clip(v)

    # --------------------------------------------------------- backprop etc.

    def backpropagate(self, children: list[Node]) -> None:
        for c in children:
            v = c.value if c.value is not None else 0.0
            n: Node | None = c
            while n is not None:
                n.visits += 1
                n.value_sum += v
                n.best = v if n.best is None else max(n.best, v)
                n = n.parent

    def _after_expansion(self, leaf: Node) -> None:
        n: Node | None = leaf
        while n is not None and not n.exhausted:
            if n.children and not all(c.terminal or c.exhausted for c in n.children):
                break
            n.exhausted = True  # a dead end (also: an expansion that gave no candidates)
            if n.parent is not None:
                self._release(n)
            n = n.parent
        self._set_priorities()

    def _set_priorities(self) -> None:
        tree_policy.set_priorities(self.root, self.puct)

    def _release(self, node: Node) -> None:
        """A node the search never expands again (terminal, or every child done).

        Its process becomes the first the tree evicts when it needs room (an
        eviction does not wait for the exit, a close does); executors that
        cannot be evicted are closed now.
        """
        snap = node.snapshot
        if snap is None or snap is self.ctx.executor:
            return
        if hasattr(snap, "priority"):
            snap.priority = float("-inf")
            return
        node.snapshot = None
        try:
            snap.close()
        except Exception:  # the tree closes what is left at the end
            log.debug("closing a search node's copy failed", exc_info=True)

    def _abort(self, futures: dict) -> None:
        """Cancel: end every process, including forks that finish meanwhile."""
        self.close()
        concurrent.futures.wait(list(futures), timeout=30)
        self.close()

    def close(self) -> None:
        with self._lock:
            created, self._created = self._created, []
        for snap in reversed(created):  # deepest first: each is reaped by its parent
            try:
                snap.close()
            except Exception:  # one copy's failure must not leave the others open
                log.warning("closing a search copy failed", exc_info=True)
        for n in self.nodes:
            if n.parent is not None:
                n.snapshot = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # --------------------------------------------------------------- result

    def answer_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.reason == "answer"]

    def candidate(self, node: Node, support: int = 1, groups: list[AnswerGroup] | None = None) -> Candidate:
        path = node.path()
        actions = [n for n in path if n.step.code and n.step.status == "ok"]
        code, steps = solution_cell([(n.step.thought, n.step.code) for n in actions], node.answer)
        results = [n.result for n in actions if n.result is not None]
        return Candidate(
            code=code, steps=steps, result=results[-1] if results else None,
            score=node.q, support=support, raw=node.raw,
            trace=[n.step for n in path], checks=self.checks(node, groups),
            meta={"answer": node.answer, "node_id": node.id, "node_ids": [n.id for n in path],
                  "search_id": self.search_id, "value": node.value, "q": node.q,
                  "visits": node.visits, "reason": node.reason,
                  "messages": self.messages(node),
                  # what the estimator read last of this node (an answer: with the whole tree's evidence),
                  # stored with a decision on it (train-value --kind features)
                  "features": node.final_features if node.final_features is not None else node.features})

    def _final_evaluation(self) -> None:
        """Every answer again, with the whole tree's evidence: the agreement and the step shares it
        was evaluated with were the tree's so far. The features are kept for the trajectories; at
        inference the new estimate becomes the answer's value (ties in the vote, ``select="value"``)."""
        answers = self.answer_nodes()
        if not answers:
            return
        states = [self.state(n) for n in answers]
        for n, st in zip(answers, states):
            n.final_features = features(st)
        if self.reward_fn is None:
            for n, v in zip(answers, self.estimator.estimate(states, self.stats)):
                n.value = clip(v)

    def finish(self) -> SearchResult:
        self._final_evaluation()
        groups = group_answers(self.answer_nodes())
        if self.cfg.select == "value":
            groups.sort(key=lambda g: (-g.value, -g.votes))
        candidates = [self.candidate(g.best, g.votes, groups) for g in groups]
        self.stats.classes = [g.votes for g in sorted(groups, key=lambda g: -g.votes)]
        answer = groups[0].best.answer if groups else None
        if not candidates:
            best = self._best_unanswered()
            if best is None:
                raise UnparsableOutput(
                    "None of the model's replies held code or an answer. Try rephrasing the "
                    "intent, or configure a stronger model (see `%agent config`).", self.stats)
            candidates = [self.candidate(best)]
        chosen = candidates[0]
        self.stats.nodes = len(self.nodes) - 1
        self.stats.value = chosen.meta["q"]
        self.ctx.events(Event("candidate", "search finished", {"index": 0, "candidate": chosen}))
        return SearchResult(chosen=chosen, candidates=candidates, stats=self.stats,
                            protections=self.ctx.protections, strategy="mcts",
                            prompt=self.first_prompt, answer=answer)

    def _best_unanswered(self) -> Node | None:
        """Without any answer: follow the highest Q down to a leaf that ran code."""
        node, best = self.root, None
        while node.children:
            ran = [c for c in node.children if c.step.code]
            if not ran:
                break
            node = max(ran, key=lambda c: (c.q, c.prior))
            best = node
        return best

    def records(self) -> list[TrajectoryRecord]:
        task_id = self.request.task.task_id
        return [TrajectoryRecord(
            messages=self.messages(n), depth=n.depth, visits=n.visits, value_sum=n.value_sum,
            terminal=n.terminal,
            terminal_reward=(n.reward if n.reward is not None else
                             n.value if n.terminal and n.reason != "answer" else None),
            final_answer=n.answer, node_id=n.id,
            parent_id=n.parent.id if n.parent is not None else None,
            search_id=self.search_id, task_id=None if task_id is None else str(task_id),
            prior=n.prior, value=n.value,
            status=n.reason or (n.step.status if n.step else "root"),
            extra={**({"features": n.features} if n.features is not None else {}),
                   **({"final_features": n.final_features} if n.final_features is not None else {})})
            for n in self.nodes]


class MCTSStrategy:
    """JUPITER's MCTS; ``reward_fn`` switches to trajectory collection (c_puct 1.25).

    ``value`` is an estimator (or its spec) that replaces ``MCTSOptions.value``;
    ``overrides`` replace fields of the request's ``MCTSOptions``.
    """

    name = "mcts"

    def __init__(self, *, reward_fn: RewardFn | None = None, value: Any = None,
                 **overrides: Any) -> None:
        self.reward_fn = reward_fn
        self.value = value
        self.overrides = overrides
        self.last_search: MCTSSearch | None = None

    def run(self, request: TurnRequest, ctx: RunContext) -> SearchResult:
        cfg = options(request, MCTSOptions, **self.overrides)
        estimator = resolve_estimator(self.value if self.value is not None else cfg.value,
                                      ctx.backend)
        if cfg.vote_share > 0 and self.reward_fn is None and not cfg.trajectory_path:
            branching = BranchingSearch(request, ctx, cfg, estimator)
            branching.stats.estimator = getattr(estimator, "label", None) or estimator.name
            return branching.run()
        search = MCTSSearch(request, ctx, cfg, estimator, self.reward_fn)
        search.stats.estimator = getattr(estimator, "label", None) or estimator.name
        self.last_search = search
        return search.run()


__all__ = [
    "AnswerGroup",
    "IterationTiming",
    "MCTSSearch",
    "MCTSStrategy",
    "Node",
    "group_answers",
    "priors",
]
