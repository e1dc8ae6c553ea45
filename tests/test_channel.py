"""Copies over the kernel channel (``kernel.channel`` + ``kernel.relay``) on a real local kernel.

The transport a gateway's kernel needs, tried where both transports reach the same kernel:
the copies' client runs in the kernel, driven by comm messages; the answers are the ones
the local (socket) transport gives; the live kernel is untouched; every copy ends with the
turn, with the relay's idle timer when the server goes away, and a second opener of a
relay's comm is refused. ``tests/test_gateway.py`` runs it across a real gateway.
"""

from __future__ import annotations

import asyncio
import threading
import time

import psutil
import pytest
from jupyter_client import AsyncKernelClient

from jupyter_data_agent.kernel import rpc
from jupyter_data_agent.kernel.host.handle import ChannelHandle, ClientHandle, InspectAsk
from jupyter_data_agent.kernel.host.launch import start_kernel, stop_kernel
from jupyter_data_agent.kernel.results import Limits
from jupyter_data_agent.kernel.tree import SnapshotError
from jupyter_data_agent.llm.scrub import Scrubber

SETUP = ("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n"
         "SECRET = 'sk-relay-secret-1234'")
STATE = "(sorted(k for k in globals() if not k.startswith('_')), get_ipython().execution_count)"


class LoopThread:
    """An event loop in a thread of its own, as the Jupyter server's: async clients live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    km, kc = start_kernel(cwd=tmp_path_factory.mktemp("channel"))
    reply = kc.execute(SETUP, reply=True, timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def loop():
    lt = LoopThread()
    yield lt
    lt.close()


def async_client(km, loop: LoopThread, *, iopub: bool) -> AsyncKernelClient:
    """A client of its own, on ``loop``; with IOPub and control for the kernel channel (as ``open_client``)."""
    async def open_():
        kc = AsyncKernelClient(**km.get_connection_info(session=False))
        kc.session.key = km.session.key
        kc.start_channels(shell=True, iopub=iopub, stdin=False, hb=False, control=iopub)
        if iopub:
            await iopub_subscribed(kc)
        return kc

    return loop.run(open_())


async def iopub_subscribed(kc: AsyncKernelClient, timeout: float = 60.0) -> None:
    """Until IOPub delivers. A ZMQ subscription reaches the kernel a moment after the socket
    connects, and what the kernel publishes before then is lost (on a loaded machine the
    reply to a test's first request was, and the test waited for it in vain). A gateway's
    websocket has no such moment: the server side's clients never wait here."""
    import queue

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id = kc.kernel_info()
        try:
            while True:
                msg = await kc.get_iopub_msg(timeout=0.5)
                if msg["parent_header"].get("msg_id") == msg_id:
                    break
        except queue.Empty:
            continue
        try:  # the replies on shell, so no later reader takes them for its own
            while True:
                await kc.get_shell_msg(timeout=0.5)
        except queue.Empty:
            return
    raise TimeoutError("the kernel's IOPub delivered nothing")


def handle(kind, km, loop: LoopThread):
    kc = async_client(km, loop, iopub=kind is ChannelHandle)
    return kind(kc, loop.loop, notebook_dir=None, fork_timeout_s=60)


def copies_of(km) -> list[psutil.Process]:
    kernel = psutil.Process(km.provisioner.pid)
    return [p for p in kernel.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def wait_no_copies(km, timeout: float = 20.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := copies_of(km)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.timeout(180)
def test_the_same_answers_as_the_local_transport_and_the_kernel_untouched(kernel, loop):
    km, kc = kernel
    before = rpc.call(kc, STATE, timeout=30)
    code = "df['a'].sum() * 2, len(df)"
    answers = {}
    for kind in (ClientHandle, ChannelHandle):
        h = handle(kind, km, loop)
        try:
            assert loop.run(h.inspect(InspectAsk())).frames[0].name == "df"
            tree = loop.run(h.fork(Limits(), max_live=4))
            try:
                assert tree.protections.missing() == [], tree.protections  # every layer, as locally
                child = tree.root.fork()
                first = child.exec("x = df['a'] + 1\nx.max()", namespace=True)  # and what it changed
                grandchild = child.fork()  # a copy of a copy: x is there
                answers[kind.transport] = (child.exec(code).value.form, grandchild.exec("int(x.max())").value.value,
                                           first.value.value, [v["name"] for v in first.namespace["new"]])
                assert tree.root.exec("'x' in globals()").value.value is False  # siblings do not share
            finally:
                tree.close()
        finally:
            h.close()
        assert wait_no_copies(km) == [], kind
    assert answers["kernel channel"] == answers["local"]
    assert answers["kernel channel"][1:] == (4, 4, ["x"])
    assert rpc.call(kc, STATE, timeout=30) == before


@pytest.mark.timeout(120)
def test_results_are_bounded_and_scrubbed_on_the_servers_side(kernel, loop):
    km, _ = kernel
    h = handle(ChannelHandle, km, loop)
    try:
        tree = loop.run(h.fork(Limits(max_output_chars=1000), max_live=2))
        tree.redact = Scrubber(["sk-relay-secret-1234"]).json
        try:
            result = tree.root.fork().exec("print(SECRET)\nprint('y' * 50_000)")
            text = result.text()
            assert "sk-relay-secret-1234" not in text, text[:200]
            assert "y" * 900 in text and "y" * 5000 not in text, len(text)
        finally:
            tree.close()
    finally:
        h.close()
    assert wait_no_copies(km) == []


@pytest.mark.timeout(120)
def test_a_second_opener_of_the_relays_comm_is_refused(kernel, loop):
    """Only the server that started a relay drives it (its target name came in that reply)."""
    km, _ = kernel
    h = handle(ChannelHandle, km, loop)
    try:
        tree = loop.run(h.fork(Limits(), max_live=2))
        try:
            other = handle(ChannelHandle, km, loop)
            try:
                async def open_second():
                    msg = other.kc.session.msg("comm_open", {"comm_id": "intruder", "target_name": tree._target,
                                                             "data": {}})
                    other.kc.shell_channel.send(msg)
                    while True:
                        m = await other.kc.get_iopub_msg(timeout=20)
                        if m["msg_type"] == "comm_close" and m["content"]["comm_id"] == "intruder":
                            return m["content"]["data"]

                assert "already has its server" in loop.run(open_second())["error"]
            finally:
                other.close()
            assert tree.root.fork().exec("1 + 1").value.value == 2  # the first server's copies go on
        finally:
            tree.close()
    finally:
        h.close()
    assert wait_no_copies(km) == []


@pytest.mark.timeout(120)
def test_copies_end_when_the_server_goes_away(kernel, loop):
    """No close ever arrives (the server died): the relay's idle timer ends the copies."""
    from jupyter_data_agent.kernel.host.channel import ChannelTree

    km, _ = kernel
    kc = async_client(km, loop, iopub=True)
    tree = loop.run(ChannelTree.open(kc, limits=Limits(), max_live=2, idle_close_s=2.0))
    tree.root.fork().exec("1")
    assert copies_of(km)
    loop.run(asyncio.sleep(0))
    loop.loop.call_soon_threadsafe(kc.stop_channels)  # gone without a word
    assert wait_no_copies(km, timeout=30) == []
    tree.closed = True  # this side's bookkeeping only: nothing is left to close


@pytest.mark.timeout(120)
def test_copies_work_while_the_users_cell_runs(kernel, loop):
    """On a kernel subshell (ipykernel 7) the relay's calls do not wait behind the live kernel's cell."""
    km, kc = kernel
    h = handle(ChannelHandle, km, loop)
    try:
        tree = loop.run(h.fork(Limits(), max_live=2))
        try:
            assert tree.subshell_id, "this kernel offers subshells (ipykernel 7): the relay should use one"
            msg_id = kc.execute("import time; time.sleep(60)")  # the user's long cell
            time.sleep(0.5)
            assert tree.root.fork().exec("int(df['a'].sum())").value.value == 6
            # answered while the cell still runs: it ends only now, interrupted
            km.interrupt_kernel()
            reply = kc.get_shell_msg(timeout=30)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        finally:
            tree.close()
    finally:
        h.close()
    assert wait_no_copies(km) == []


@pytest.mark.timeout(120)
def test_a_closed_tree_refuses_more_work(kernel, loop):
    km, _ = kernel
    h = handle(ChannelHandle, km, loop)
    try:
        tree = loop.run(h.fork(Limits(), max_live=2))
        child = tree.root.fork()
        tree.close()
        with pytest.raises(SnapshotError):
            child.exec("1")
        with pytest.raises(SnapshotError):
            tree.root.fork()
    finally:
        h.close()
    assert wait_no_copies(km) == []
