"""Code rules as tests: small modules, packages that say what they hold, no silent broad except.

Each rule reads every module under src/agentpost. The exception lists are exact: an entry the
code no longer needs fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "agentpost"
MAX_LINES = 600
"""Past this a module is a sign that a concept wants its own file (DESIGN.md, Layers)."""

LONG_MODULES: dict[str, str] = {}
"""Modules allowed past MAX_LINES (path relative to src/agentpost → why)."""

SILENT_BROAD_EXCEPTS: dict[str, str] = {}
"""`path:line` of broad handlers allowed to neither raise nor call anything (→ why)."""

BROAD = frozenset({"Exception", "BaseException"})


def sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _names(node: ast.expr | None) -> set[str]:
    """The exception class names a handler's type (or `suppress(...)` argument) mentions."""
    if node is None:
        return set(BROAD)  # a bare `except:` catches everything
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _walk_body(statements: list[ast.stmt]) -> list[ast.AST]:
    """Every node of these statements, but not of functions or classes defined in them."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return out


def silent_broad_handlers(source: str) -> list[int]:
    """Lines of broad handlers that neither re-raise nor call anything (log, record, answer).

    `contextlib.suppress(Exception)` can do neither, so it counts as one as well.
    """
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and _names(node.type) & BROAD:
            body = _walk_body(node.body)
            if not any(isinstance(n, ast.Raise | ast.Call) for n in body):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and _names(node.func) == {"suppress"}
            and any(_names(arg) & BROAD for arg in node.args)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def line_count(source: str) -> int:
    return len(source.splitlines())


# -- the checkers themselves ------------------------------------------------------------------


SAMPLE = """\
try:
    work()
except Exception:  # silent
    pass
try:
    work()
except (ValueError, BaseException) as e:  # silent
    x = e
try:
    work()
except:  # silent
    def later():
        log()
try:
    work()
except Exception:
    raise
try:
    work()
except Exception as e:
    log.warning("failed: %s", e)
try:
    work()
except Exception as e:
    return error_result(e)
try:
    work()
except ValueError:
    pass
with contextlib.suppress(Exception):  # silent
    work()
with suppress(TimeoutError):
    work()
"""


def test_a_broad_handler_must_raise_or_call_something() -> None:
    silent = [n for n, line in enumerate(SAMPLE.splitlines(), 1) if line.endswith("# silent")]
    assert silent_broad_handlers(SAMPLE) == silent


# -- the rules --------------------------------------------------------------------------------


def test_modules_stay_under_the_line_limit() -> None:
    too_long = {
        path: line_count(text)
        for path, text in sources().items()
        if line_count(text) > MAX_LINES and path not in LONG_MODULES
    }
    assert not too_long, f"over {MAX_LINES} lines; split by concept: {too_long}"


def test_every_long_module_exception_is_still_needed() -> None:
    texts = sources()
    stale = sorted(p for p in LONG_MODULES if p not in texts or line_count(texts[p]) <= MAX_LINES)
    assert not stale, f"no longer over {MAX_LINES} lines; remove from LONG_MODULES: {stale}"


def test_every_package_opens_with_a_docstring() -> None:
    missing = sorted(
        path
        for path, text in sources().items()
        if Path(path).name == "__init__.py" and not ast.get_docstring(ast.parse(text))
    )
    assert not missing, f"say what lives here and what it may import: {missing}"


def test_a_broad_except_re_raises_or_records() -> None:
    silent = [
        f"src/agentpost/{path}:{line}"
        for path, text in sources().items()
        for line in silent_broad_handlers(text)
        if f"{path}:{line}" not in SILENT_BROAD_EXCEPTS
    ]
    assert not silent, "a broad except that swallows the error:\n" + "\n".join(silent)


def test_every_silent_broad_except_exception_is_still_needed() -> None:
    found = {
        f"{path}:{line}" for path, text in sources().items() for line in silent_broad_handlers(text)
    }
    stale = sorted(set(SILENT_BROAD_EXCEPTS) - found)
    assert not stale, f"remove from SILENT_BROAD_EXCEPTS: {stale}"
