"""The tests own their fixtures: no test of the runtime needs the benchmarks' distribution.

The model server is ``tests/openai_server/`` (the bench's ``loop`` reuses it), started through
``model_server_factory`` in ``conftest.py``, which alone declares ``pytest_plugins``.
"""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
BENCH = "jupyter_data_agent_bench"

#: The bench's own tests: they may import it.
BENCH_TESTS = ("test_bench_*.py", "test_dabench_*.py", "test_lab.py", "test_learning_loop.py", "test_metrics.py")

#: Runtime tests that still borrow a bench helper, each with what it borrows; none may be added.
BORROWS = {
    "gateway_helpers.py": "loop.JupyterServer, the server subprocess client the gateway server extends",
}


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _imported(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in the file names (at any depth)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _is_bench_test(path: Path) -> bool:
    return path.parent == TESTS and any(path.match(pattern) for pattern in BENCH_TESTS)


def test_only_the_bench_tests_import_the_bench():
    importers = {
        str(p.relative_to(TESTS)) for p in _python_files()
        if not _is_bench_test(p) and any(n == BENCH or n.startswith(BENCH + ".") for n in _imported(p))
    }
    assert importers == set(BORROWS), f"runtime tests importing {BENCH}: {sorted(importers - set(BORROWS))}; " \
                                      f"no longer: {sorted(set(BORROWS) - importers)}"


def test_the_model_server_is_the_tests_own():
    server = TESTS / "openai_server"
    assert (server / "__init__.py").is_file() and (server / "__main__.py").is_file()
    assert not any(n.startswith(BENCH) for p in server.glob("*.py") for n in _imported(p))


def test_pytest_plugins_are_declared_once_in_the_root_conftest():
    declaring = sorted(
        str(p.relative_to(TESTS)) for p in _python_files()
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytest_plugins" for t in node.targets)
    )
    assert declaring == ["conftest.py"]
