"""The kernel-side modules, injected into a kernel as package ``_jda_kernel``.

``_jda_kernel`` mirrors ``jupyter_data_agent.kernel``: the shared modules at its top,
the rest in the same sub-packages (``copy``, ``inkernel``, ``forktree``), so the
modules' relative imports work unchanged in both places.

A fork tree's root and a replay kernel are made by calling into
``fork_server`` inside the user's kernel through an execute request
(``kernel_call``). The modules travel as source text with the call, so
kernels running in another environment (without jupyter_data_agent
installed) can still be forked, always with the client's own protocol
version; a kernel that already holds this exact version is called directly.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

#: The modules a kernel and its copies run, each after the ones it imports, by their
#: place under ``jupyter_data_agent.kernel`` (``_jda_kernel`` mirrors its sub-packages).
KERNEL_MODULES = ("answer_form", "results", "protocol", "plots",
                  "copy.libc", "copy.confine", "copy.harden", "copy.procs",
                  "copy.syscall_filter", "copy.reaper", "copy.capture", "copy.cell_exec", "copy.namespace_diff",
                  "copy.after_fork", "copy.copy_server", "inkernel.fork_server",
                  # the copies' client, for kernels whose server reaches them only through the kernel
                  "tree", "rpc", "forktree.copy_process", "forktree.snapshot_node",
                  "forktree.snapshot", "forktree.relay")
#: Where the seccomp binding goes for kernels whose environment lacks it (``syscall_filter``).
PYSECCOMP = "copy.pyseccomp"


@functools.lru_cache(maxsize=1)
def _bootstrap_source() -> tuple[str, str]:
    """(digest, code that installs the kernel-side modules as package ``_jda_kernel``)."""
    kernel = Path(__file__).parent.parent
    srcs = {n: (kernel / f"{n.replace('.', '/')}.py").read_text(encoding="utf-8") for n in KERNEL_MODULES}
    try:  # the seccomp binding, for kernels whose environment lacks it
        import pyseccomp

        srcs = {PYSECCOMP: Path(pyseccomp.__file__).read_text(encoding="utf-8"), **srcs}
    except (ImportError, OSError, RuntimeError):
        pass
    digest = hashlib.sha256(json.dumps(srcs, sort_keys=True).encode()).hexdigest()[:16]
    return digest, (
        "import sys, types\n"
        f"_srcs = {srcs!r}\n"
        "_p = sys.modules.get('_jda_kernel')\n"
        f"if getattr(_p, '__digest__', None) != {digest!r}:\n"
        "    _p = types.ModuleType('_jda_kernel')\n"
        "    _p.__path__ = []\n"
        f"    _p.__digest__ = {digest!r}\n"
        "    sys.modules['_jda_kernel'] = _p\n"
        "    for _n, _s in _srcs.items():\n"
        "        _pkg, _, _leaf = ('_jda_kernel.' + _n).rpartition('.')\n"
        "        if _pkg not in sys.modules or getattr(sys.modules[_pkg], '__digest__', None) != "
        f"{digest!r}:\n"
        "            _sub = types.ModuleType(_pkg)\n"
        "            _sub.__path__ = []\n"
        f"            _sub.__digest__ = {digest!r}\n"
        "            sys.modules[_pkg] = _sub\n"
        "            setattr(_p, _pkg.rpartition('.')[2], _sub)\n"
        "        _m = types.ModuleType('_jda_kernel.' + _n)\n"
        "        _m.__package__ = _pkg\n"
        "        _m.__file__ = '<jda:' + _n + '>'\n"
        "        sys.modules[_m.__name__] = _m\n"
        "        try:\n"
        "            exec(compile(_s, _m.__file__, 'exec'), _m.__dict__)\n"
        "        except Exception:\n"
        f"            if _n != {PYSECCOMP!r}:\n"
        "                raise\n"
        "            del sys.modules[_m.__name__]\n"
        "            continue\n"
        "        setattr(sys.modules[_pkg], _leaf, _m)\n"
    )


def direct_call(call: str, module: str = "inkernel.fork_server") -> str:
    """``_jda_kernel.<module>.<call>`` in a kernel whose modules are installed."""
    return f"__import__('sys').modules['_jda_kernel.{module}'].{call}"


def kernel_call(call: str, module: str = "inkernel.fork_server") -> str:
    """A user expression calling ``_jda_kernel.<module>.<call>`` in a kernel,
    installing the modules first unless this exact version is already there."""
    digest, boot = _bootstrap_source()
    target = direct_call(call, module)
    return (f"({target} if getattr(__import__('sys').modules.get('_jda_kernel'), "
            f"'__digest__', None) == {digest!r} else "
            f"(exec(compile({boot!r}, '<jda-bootstrap>', 'exec'), {{}}) or {target}))")

