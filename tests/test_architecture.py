"""The layers, read from the imports: faces → services → store → domain, one home per library.

Every import of every module under src/agentpost is read from its syntax tree: at module level,
inside functions and under `TYPE_CHECKING` alike, so a lazy or type-only import answers to the
same rules as any other. Each violation is reported as `module:line`. The allow-lists below are
exact: an entry that no import needs any more fails too, so an exception never outlives its
reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "agentpost"
ROOT = "agentpost"

# What each layer may import of ours. `agentpost` itself holds the version and, lazily, the
# client's two classes and the error they raise (it imports nothing else of ours), so every layer
# but the domain may read it.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "domain": frozenset({"domain"}),
    # Where the settings file lives and how it reads: standard library only, for the hook.
    "settings_file": frozenset({"settings_file"}),
    # How background loops that retry forever log their failures: standard library only.
    "retries": frozenset({"retries"}),
    # Keeping a started process's objects out of the garbage collector: standard library only.
    "heap": frozenset({"heap"}),
    "config": frozenset({"config", "domain", "settings_file"}),
    "store": frozenset({"store", "domain", "config", ROOT}),
    "services": frozenset({"services", "store", "domain", "config", "retries", ROOT}),
    # The Python client speaks to a service over HTTP only: never the services or the store.
    "client": frozenset({"client", "domain", "config", ROOT}),
    "mcp": frozenset({"mcp", "services", "client", "domain", "config", "retries", "heap", ROOT}),
    "http": frozenset({"http", "services", "domain", "config", ROOT}),
    "cli": frozenset({"cli", "services", "client", "domain", "config", "settings_file", ROOT}),
    # The composition root of `agentpost serve`: the one module that puts faces side by side.
    "service": frozenset({"http", "mcp", "services", "domain", "config", "heap", ROOT}),
    # `agentpost.Client` and `agentpost.AsyncClient`: imported on first use (the package's
    # `__getattr__`) and for type checkers; tests/test_public_api.py checks that importing
    # `agentpost` does not load the client. `AgentpostError` and `ErrorCode` come the same way.
    ROOT: frozenset({"client", "domain"}),
}
FACES = frozenset({"mcp", "http", "cli"})

# (importer, imported, the function the import must sit in): the only crossings between faces.
ALLOWED_CROSSINGS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # `agentpost mcp` runs the MCP face's stdio entry point; the CLI imports it inside that
        # one function, so no other command loads the MCP SDK.
        ("agentpost.cli.entry", "agentpost.mcp.stdio", "serve_mcp"),
        # `agentpost mcp --url` runs the remote-backed stdio entry point, in the same function;
        # a separate import, so the local start never loads the client (nor httpx for it).
        ("agentpost.cli.entry", "agentpost.mcp.remote", "serve_mcp"),
        # `agentpost serve` starts the assembled service, inside that one command.
        ("agentpost.cli.main", "agentpost.service", "serve"),
        # `agentpost hook claude` runs on every prompt and tool call of a Claude Code session: it
        # reads new mail with the standard library's sqlite3 (the services load SQLAlchemy).
        ("agentpost.cli.hook", "agentpost.store.notes", "note_for"),
    }
)

# The domain does no I/O: besides itself it may import only these standard-library modules.
DOMAIN_STDLIB: frozenset[str] = frozenset(
    {
        "__future__",
        "bisect",  # the tracked files under a reserved pattern's literal start
        "collections.abc",
        "dataclasses",
        "enum",
        "functools",  # the frames cache what names and subjects render to
        "hashlib",  # a slug cut short ends in its text's hash
        "typing",
        "json",  # message data is JSON; its size is a domain rule
        "math",  # a timeout or TTL must be a finite number
        "re",  # the name grammar
        "secrets",  # random parts of ids, frame nonces
        "threading",  # a lock: ids of one millisecond follow one another on every thread
        "time",  # ids sort by creation time
        "unicodedata",  # slugs take accents off letters
    }
)

# Each third-party library, and the only modules (or packages) that may import it.
HOMES: dict[str, tuple[str, ...]] = {
    "mcp": ("agentpost.mcp.adapter",),
    "starlette": ("agentpost.mcp.adapter", "agentpost.http"),
    "fastapi": ("agentpost.http",),
    "fastapi_offline": ("agentpost.http.app",),
    "sse_starlette": ("agentpost.http.events",),
    "uvicorn": ("agentpost.service",),
    "sqlalchemy": ("agentpost.store",),
    "alembic": ("agentpost.store",),
    "asyncpg": ("agentpost.store",),
    "typer": ("agentpost.cli",),
    "rich": ("agentpost.cli",),
    "pydantic_settings": ("agentpost.config",),
    "inotify_simple": ("agentpost.store.signal",),
    "httpx": ("agentpost.services.outbound", "agentpost.client"),
    "tomlkit": ("agentpost.cli.install",),
}


@dataclass(frozen=True)
class Import:
    module: str
    """The importing module, e.g. `agentpost.services.mailbox`."""
    line: int
    target: str
    """The imported module, absolute, e.g. `sqlalchemy` or `agentpost.store.mail`."""
    function: str | None
    """The innermost function the import sits in; None at module (or class) level."""

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def read_imports(
    module: str, source: str, *, is_package: bool = False, known: Iterable[str] = ()
) -> list[Import]:
    """Every import in `source`, wherever it sits, with relative imports made absolute.

    `from pkg import name` counts as importing `pkg.name` when that is one of the `known`
    modules, else as importing `pkg`.
    """
    known = set(known)
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                else function
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(module, child.lineno, alias.name, function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = _package_of(module, is_package).split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = (f"{base}.{alias.name}" for alias in child.names)
                for target in dict.fromkeys(t if t in known else base for t in targets):
                    found.append(Import(module, child.lineno, target, function))
            visit(child, inner)

    visit(ast.parse(source), None)
    return found


@cache
def all_imports() -> tuple[Import, ...]:
    known = modules()
    out: list[Import] = []
    for name, path in known.items():
        out.extend(
            read_imports(name, path.read_text(), is_package=path.name == "__init__.py", known=known)
        )
    return tuple(out)


def ours(target: str) -> bool:
    return target == ROOT or target.startswith(ROOT + ".")


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def in_home(module: str, home: str) -> bool:
    return module == home or module.startswith(home + ".")


def crossing(imp: Import) -> tuple[str, str, str] | None:
    """The allow-list entry this import uses, if it is one."""
    for entry in ALLOWED_CROSSINGS:
        importer, target, function = entry
        if (imp.module, imp.target, imp.function) == (importer, target, function):
            return entry
    return None


def report(violations: Iterable[object]) -> str:
    return "\n".join(str(v) for v in violations)


# -- the reader itself ------------------------------------------------------------------------


def test_the_reader_sees_imports_in_functions_under_type_checking_and_relative_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import sqlalchemy.orm\n"
        "if TYPE_CHECKING:\n"
        "    from agentpost.store import mail\n"
        "def command():\n"
        "    from agentpost.mcp.stdio import serve_stdio\n"
        "    async def inner():\n"
        "        from . import render\n"
        "class Holder:\n"
        "    from ..domain.errors import AgentpostError\n"
    )
    found = read_imports(
        "agentpost.cli.main",
        source,
        known={"agentpost.store.mail", "agentpost.cli.render"},
    )
    assert [(i.line, i.target, i.function) for i in found] == [
        (1, "typing", None),
        (2, "sqlalchemy.orm", None),
        (4, "agentpost.store.mail", None),
        (6, "agentpost.mcp.stdio", "command"),
        (8, "agentpost.cli.render", "inner"),
        (10, "agentpost.domain.errors", None),
    ]
    assert str(found[2]) == "agentpost.cli.main:4 imports agentpost.store.mail"


def test_the_reader_finds_the_whole_package() -> None:
    names = modules()
    assert {"agentpost", "agentpost.config", "agentpost.cli.main", "agentpost.mcp.adapter"} <= set(
        names
    )
    assert "agentpost.store.migrations.env" in names, "Alembic's scripts are ours too"


# -- layers -----------------------------------------------------------------------------------


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = sorted(m for m in modules() if layer_of(m) not in MAY_IMPORT)
    assert not unknown, "classify these in MAY_IMPORT:\n" + "\n".join(unknown)


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_imports_point_down_only(layer: str) -> None:
    """Store: domain, config. Services: store, domain, config. Faces: services, domain, config;
    never the store, never each other (but for ALLOWED_CROSSINGS). Config: the domain only."""
    allowed = MAY_IMPORT[layer]
    violations = [
        imp
        for imp in all_imports()
        if layer_of(imp.module) == layer
        and ours(imp.target)
        and layer_of(imp.target) not in allowed
        and crossing(imp) is None
    ]
    assert not violations, f"{layer} may import only {sorted(allowed)}:\n" + report(violations)


def test_every_allowed_crossing_is_still_needed() -> None:
    used = {crossing(imp) for imp in all_imports()}
    stale = sorted(ALLOWED_CROSSINGS - used)
    assert not stale, f"no import needs these any more; remove them: {stale}"


def test_the_domain_imports_only_itself_and_pure_standard_modules() -> None:
    violations = [
        imp
        for imp in all_imports()
        if layer_of(imp.module) == "domain"
        and not (ours(imp.target) and layer_of(imp.target) == "domain")
        and not any(in_home(imp.target, allowed) for allowed in DOMAIN_STDLIB)
    ]
    assert not violations, "the domain does no I/O:\n" + report(violations)


def test_every_allowed_domain_module_is_still_used() -> None:
    used = {
        allowed
        for imp in all_imports()
        if layer_of(imp.module) == "domain"
        for allowed in DOMAIN_STDLIB
        if in_home(imp.target, allowed)
    }
    stale = sorted(DOMAIN_STDLIB - used)
    assert not stale, f"the domain no longer imports these; remove them: {stale}"


# -- one home per library ---------------------------------------------------------------------


def test_each_library_is_imported_only_in_its_home() -> None:
    violations = [
        f"{imp} (home: {', '.join(HOMES[library])})"
        for imp in all_imports()
        if (library := imp.target.split(".")[0]) in HOMES
        and not any(in_home(imp.module, home) for home in HOMES[library])
    ]
    assert not violations, "a library outside its home:\n" + report(violations)


def test_every_home_is_a_real_module_or_package() -> None:
    names = set(modules())
    missing = sorted(
        home
        for homes in HOMES.values()
        for home in homes
        if not any(in_home(n, home) for n in names)
    )
    assert not missing, f"homes that do not exist: {missing}"


# -- faces speak to the services, not the store -------------------------------------------------


def store_reaches(source: str) -> list[int]:
    """Lines where `source` reads an attribute named `store` (`office.store.watch(…)`): the
    store reached through the services' objects, a crossing no import shows."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "store"
    )


def test_the_reader_sees_the_store_reached_through_an_attribute() -> None:
    source = (
        "from agentpost.store import notes\n"
        "'office.store in a string'\n"
        "with office.store.watch(None) as news:\n"
        "    path = self.office.store.path\n"
    )
    assert store_reaches(source) == [3, 4]


def test_faces_never_reach_into_the_store_through_the_services() -> None:
    violations = [
        f"{name}:{line} reads .store"
        for name, path in modules().items()
        if layer_of(name) in FACES
        for line in store_reaches(path.read_text())
    ]
    assert not violations, "ask a service instead:\n" + report(violations)
