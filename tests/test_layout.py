"""The source's shape stays reviewable: small files, no private names shared across modules.

No product file over ``MAX_LINES`` lines (issue 36): Python under
``jupyter_data_agent/`` and TypeScript under ``src/`` (its tests and the
generated ``src/wire.ts`` aside). Ruff's ``PLC2701`` catches private names
imported from another top-level package only; the package's own modules are
checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jupyter_data_agent"
MAX_LINES = 600
def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _product_files() -> list[Path]:
    """The package's Python; the front end's files are held to the same limit by eslint
    (``max-lines`` and ``max-lines-per-function`` in eslint.config.mjs)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts)


def test_no_product_file_over_the_limit():
    over = {p.relative_to(ROOT).as_posix(): n for p in _product_files() if (n := _lines(p)) > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: split by concern: {over}"


def _private_imports(path: Path) -> list[str]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = parts[:-1]  # a module's package, or an __init__'s own
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if node.level == 0 and not module.startswith("jupyter_data_agent"):
            continue  # another distribution's private names: ruff's PLC2701
        target = module if node.level == 0 else ".".join(
            [*package[: len(package) - node.level + 1], *([module] if module else [])])
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {target} import {a.name}"
                  for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module():
    found = [line for p in sorted(PACKAGE.rglob("*.py")) for line in _private_imports(p)]
    assert not found, "a helper two modules share is public:\n" + "\n".join(found)
