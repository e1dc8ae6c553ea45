"""The first sidebar answer's timeline, as the user sees it: ``python -m jupyter_data_agent_bench.first_answer``.

A fresh ``jupyter server`` subprocess with this extension and its defaults
(the embedded GGUF on llama.cpp behind the model service, not loaded yet),
a real kernel (``POST /api/kernels``) and the sales notebook of
:mod:`.first_token` run in it ("Run All"). As the front end does after Run
All (``src/warm.ts``), ``POST warm`` goes out for the focused cell
(``inline``) and the notebook (``turn``) without waiting for their replies;
``--ask-after`` seconds later the user asks (``POST turns``, direct). Printed:
every progress event's text with its time since ``POST turns``, up to the
first candidate, and each warm's status code and reply. Measurement only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import aclosing

from .first_token import INTENT_1, Kernel, _notebook, job_events, served
from .loop import NS


def _post(server, path: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(f"{server.url}/{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"token {server.token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()[:300]


async def _timeline(server, job_id: str, start: float) -> list[tuple[float, str, str]]:
    rows: list[tuple[float, str, str]] = []
    async with aclosing(job_events(server, job_id)) as stream:
        async for event in stream:
            if event["type"] == "delta":
                continue
            rows.append((time.perf_counter() - start, event["type"], event["message"]))
            if event["type"] in ("candidate", "done", "error"):
                break
    return rows


def first_answer(ask_after: float, warms: bool) -> dict:
    with served() as server:
        kernel = Kernel(server)
        try:
            cells = _notebook(kernel)  # Run All
            last = len(cells) - 1
            warm_replies: list[tuple[str, float, int, str]] = []
            sent = time.perf_counter()

            def warm(kind: str) -> None:
                body = {"version": 1, "kind": kind, "notebook_path": "sales.ipynb", "kernel_id": kernel.id,
                        "cells": cells[:last] if kind == "inline" else cells,
                        "active_index": None if kind == "inline" else last, "metadata": {}}
                code, reply = _post(server, f"{NS}/warm", body)
                warm_replies.append((kind, time.perf_counter() - sent, code, reply))

            threads = [threading.Thread(target=warm, args=(k,)) for k in (("inline", "turn") if warms else ())]
            for t in threads:
                t.start()
            time.sleep(ask_after)
            start = time.perf_counter()
            code, reply = _post(server, f"{NS}/turns", {
                "version": 1, "notebook_path": "sales.ipynb", "kernel_id": kernel.id, "strategy": "direct",
                "cells": cells, "active_index": last, "intent": INTENT_1})
            if code != 202 and code != 200:
                raise RuntimeError(f"POST turns answered {code}: {reply}")
            rows = asyncio.run(_timeline(server, json.loads(reply)["job_id"], start))
            for t in threads:
                t.join(600)
            return {"rows": rows, "warms": [(k, round(s - ask_after, 1), c, r) for k, s, c, r in warm_replies]}
        finally:
            kernel.close()


def _collapsed(rows: list) -> list[tuple[str, str]]:
    """(time, text) rows; a run of lines of one kind ("generating: ...") as its first and last."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(rows):
        t, _, message = rows[i]
        head = message.split(":")[0]
        j = i
        while j + 1 < len(rows) and ":" in message and rows[j + 1][2].split(":")[0] == head:
            j += 1
        if j - i >= 2:
            out.append((f"{t:.1f}-{rows[j][0]:.1f}", f"{message[:60]} ... {rows[j][2][len(head) + 2:][:50]}"))
        else:
            out += [(f"{r[0]:.1f}", r[2][:110]) for r in rows[i:j + 1]]
        i = j + 1
    return out


def table(result: dict) -> str:
    lines = ["| t (s) | what the sidebar says |", "|---|---|"]
    lines += [f"| {t} | {text} |" for t, text in _collapsed(result["rows"])]
    for kind, t, code, reply in result["warms"]:
        lines.append(f"\nPOST warm ({kind}): HTTP {code} at {t:+.1f} s from POST turns: {reply[:160]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ask-after", type=float, default=0.5,
                        help="seconds between the warms going out and POST turns (default 0.5)")
    parser.add_argument("--no-warm", action="store_true", help="send no POST warm before the turn")
    parser.add_argument("--json", help="also write the timeline here")
    args = parser.parse_args()
    result = first_answer(args.ask_after, not args.no_warm)
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
