"""Rewrite references to moved modules in the given files.

The moves are ``old.module new.module`` lines (``kernel-moves.txt`` by default).
Rewritten: ``from`` imports, absolute (``jupyter_data_agent.kernel.X``) and
relative (``..kernel.X``, ``.X``, ``from ..kernel import X, Y``, split when the
names moved to different packages); dotted names anywhere else in the text
(``import a.b.c``, code in strings, monkeypatch targets, ``python -m``) and their
file paths (``jupyter_data_agent/kernel/X.py``). A file that itself moved keeps
the relative imports written for its old place: they are resolved from there and
written anew from its new place. Idempotent.

    python scripts/apply_kernel_moves.py [--moves kernel-moves.txt] FILE...
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT_PACKAGE = "jupyter_data_agent"

FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+(?P<mod>\.*[\w.]*)[ \t]+import[ \t]+"
    r"(?P<names>\([^)]*\)|[^\n#]*?)(?P<trail>[ \t]*(?:#[^\n]*)?)$",
    re.M,
)


def load_moves(path: Path) -> dict[str, str]:
    moves = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.lstrip().startswith("#"):
            moves[parts[0]] = parts[1]
    return moves


def root_of(path: Path) -> Path | None:
    """The directory that holds the root package, above ``path``."""
    parts = path.resolve().parts
    if ROOT_PACKAGE not in parts:
        return None
    return Path(*parts[: len(parts) - 1 - parts[::-1].index(ROOT_PACKAGE)])


def module_of(path: Path) -> tuple[str | None, bool]:
    """(dotted module name of a file of the package, whether it is a package's ``__init__``)."""
    parts = path.resolve().with_suffix("").parts
    if ROOT_PACKAGE not in parts or path.suffix != ".py":
        return None, False
    dotted = list(parts[len(parts) - 1 - parts[::-1].index(ROOT_PACKAGE):])
    is_pkg = dotted[-1] == "__init__"
    if is_pkg:
        dotted.pop()
    return ".".join(dotted), is_pkg


def package_of(module: str, is_pkg: bool) -> str:
    return module if is_pkg else module.rpartition(".")[0]


def resolve(mod: str, package: str) -> str:
    dots = len(mod) - len(mod.lstrip("."))
    if not dots:
        return mod
    base = package.split(".")
    base = base[: len(base) - (dots - 1)]
    rest = mod[dots:]
    return ".".join(base + ([rest] if rest else []))


def relative(target: str, package: str) -> str:
    """``target`` written relative to ``package`` (absolute when outside the root package)."""
    t, p = target.split("."), package.split(".")
    if t[0] != p[0]:
        return target
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    return "." * (len(p) - common + 1) + ".".join(t[common:])


def split_names(names: str) -> list[str]:
    inner = names.strip()
    if inner.startswith("("):
        inner = inner[1:-1]
    inner = re.sub(r"#[^\n]*", "", inner)
    return [n.strip() for n in inner.replace("\n", " ").split(",") if n.strip()]


def resolves(module: str, names: list[str], root: Path | None) -> bool:
    """Whether ``from module import names`` names files of the tree under ``root``."""
    def exists(dotted: str) -> bool:
        base = root / dotted.replace(".", "/") if root else None
        return bool(base) and (base.with_suffix(".py").is_file() or base.is_dir())

    if not exists(module):
        return False
    package = root / module.replace(".", "/") if root else None
    if package is None or not package.is_dir():
        return True  # names from a module: its own attributes
    init = package / "__init__.py"
    defined = set()
    if init.is_file():
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    return all(exists(f"{module}.{n.split(' as ')[0].strip()}") or n.split(" as ")[0].strip() in defined
               for n in names)


def rewrite_imports(text: str, moves: dict[str, str], module: str | None, is_pkg: bool,
                    root: Path | None = None) -> str:
    inverse = {new: old for old, new in moves.items()}
    here = package_of(module, is_pkg) if module else None
    origin = package_of(inverse.get(module, module), is_pkg) if module else None

    def write(target: str, was_relative: bool) -> str:
        return relative(target, here) if was_relative and here else target

    def sub(m: re.Match[str]) -> str:
        mod = m["mod"]
        was_relative = mod.startswith(".")
        if was_relative and not origin:
            return m[0]
        moved_file = origin != here
        if was_relative and moved_file and here and resolves(resolve(mod, here), split_names(m["names"]), root):
            return m[0]  # already written for the file's new place
        absolute = resolve(mod, origin) if was_relative else mod
        if absolute in moves:
            return f"{m['indent']}from {write(moves[absolute], was_relative)} import {m['names']}{m['trail']}"
        names = split_names(m["names"])
        targets = [moves.get(f"{absolute}.{n.split(' as ')[0].strip()}") for n in names]
        if not any(targets) and not (was_relative and moved_file):
            return m[0]
        groups: dict[str, list[str]] = {}
        for name, target in zip(names, targets):
            groups.setdefault(target.rpartition(".")[0] if target else absolute, []).append(name)
        lines = []
        for i, (package, group) in enumerate(groups.items()):
            joined = ", ".join(group)
            if len(groups) == 1 and m["names"].strip().startswith("("):
                joined = m["names"]
            trail = m["trail"] if i == 0 else ""
            lines.append(f"{m['indent']}from {write(package, was_relative)} import {joined}{trail}")
        return "\n".join(lines)

    return FROM_IMPORT.sub(sub, text)


def rewrite_names(text: str, moves: dict[str, str]) -> str:
    """Dotted names and their file paths, anywhere in the text."""
    table = dict(moves)
    for old, new in moves.items():
        if old.startswith(ROOT_PACKAGE + "."):
            table[old.replace(".", "/") + ".py"] = new.replace(".", "/") + ".py"
    pattern = re.compile(r"(?<![\w./])(" + "|".join(
        re.escape(k) for k in sorted(table, key=len, reverse=True)) + r")(?![\w/])")
    return pattern.sub(lambda m: table[m[1]], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=Path, default=Path(__file__).resolve().parent.parent / "kernel-moves.txt")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    moves = load_moves(args.moves)
    changed = 0
    for path in args.files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # not a text file
        module, is_pkg = module_of(path)
        new = rewrite_names(rewrite_imports(text, moves, module, is_pkg, root_of(path)), moves)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
            print(f"rewrote {path}")
    print(f"{changed} file(s) changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
