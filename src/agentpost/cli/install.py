"""`agentpost install claude|codex`: put agentpost into an agent client's settings, merging;
`agentpost uninstall claude|codex` takes it out again.

`claude` writes the MCP server entry into the project's `.mcp.json` and the hooks
(SessionStart, UserPromptSubmit, PostToolUse → `agentpost hook claude`) into the project's
`.claude/settings.json`; `codex` writes `[mcp_servers.agentpost]` into `~/.codex/config.toml`
($CODEX_HOME if set), through tomlkit so comments and other tables survive.

Merging, never clobbering: every other key, server and hook stays as it was; an `agentpost`
server entry that is already there is kept as written (it may carry the user's own `--url` or
environment), and a hook already running `agentpost hook claude` is not added again. So running
it twice changes nothing, and `--dry-run` prints the change as a diff and writes nothing. A file
that is not valid JSON or TOML is refused, untouched. An entry or hook whose command is an
absolute path to an `agentpost` that is gone (a moved virtualenv) is pointed at this one.

Uninstalling removes the `agentpost` server and every hook running `agentpost hook claude`, and
the groups, lists and files that held only them; the rest is written back as install writes it.
For Codex it removes `[mcp_servers.agentpost]` (and `mcp_servers` when that held only it)
through tomlkit, so every other byte of the file stays; a file left empty is removed.

The command: `agentpost` when that name on PATH is this installation, else this installation's
absolute path (so a Claude Code started from another shell still finds it). `.mcp.json` is often
committed: the bare name keeps it portable across machines.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from agentpost.cli.agent_servers import SERVER, codex_config_path
from agentpost.cli.literal import visible
from agentpost.domain.errors import AgentpostError, ErrorCode

HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse")
HOOK_TIMEOUT_S = 10


@dataclass(frozen=True)
class Change:
    """One file's new text and what changed in it, in words."""

    path: Path
    before: str | None
    after: str | None
    """None: the file is removed."""
    done: list[str]
    folder: Path | None = None
    """Removed too when removing the file leaves it empty (a folder install made)."""

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                (self.after or "").splitlines(keepends=True),
                fromfile=str(self.path) if self.before is not None else "/dev/null",
                tofile=str(self.path) if self.after is not None else "/dev/null",
            )
        )


def executable() -> str:
    """How a client should start agentpost: the bare name when PATH finds this installation."""
    mine = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "agentpost" else None
    if mine is None or not mine.exists():
        mine = Path(sys.executable).with_name("agentpost").resolve()
    found = shutil.which("agentpost")
    if found is not None and Path(found).resolve() == mine:
        return "agentpost"
    return str(mine)


def project_root(start: Path) -> Path:
    """The repository's top folder (where Claude Code looks for `.mcp.json`), else `start`."""
    from agentpost.services.local_identity import run_git

    done = run_git(start, "rev-parse", "--show-toplevel")
    if done is None or done.returncode != 0:
        return start
    return Path(done.stdout.strip())


def _read(path: Path) -> str | None:
    """The settings file's text (None: there is none yet); one that cannot be merged into,
    text of another encoding or a folder in its place, is refused, and nothing is written."""
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT, f"cannot read {path}: {exc.strerror or exc}"
        ) from None


class _Unwritable(ValueError):
    """JSON that, read and written again, would not say what it said."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:  # written back, the first would be gone
            raise _Unwritable(f"it has the key {key!r} twice in one object")
        seen[key] = value
    return seen


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):  # written back as Infinity: no JSON Claude Code reads
        raise _Unwritable(f"its number {number} is too large to write back")
    return value


def _integer(number: str) -> int:
    try:
        return int(number)
    except ValueError:  # past Python's limit on digits
        raise _Unwritable(f"it holds a number of {len(number)} digits") from None


def _no_constant(name: str) -> Any:
    raise _Unwritable(f"it holds {name}, which is not JSON")


def _json_object(path: Path, text: str | None) -> dict[str, Any]:
    """The settings, as long as writing them back keeps what they say; else refused."""
    if text is None or not text.strip():
        return {}
    try:
        loaded = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_float=_finite,
            parse_int=_integer,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not JSON: {exc}") from None
    except _Unwritable as exc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT, f"{path} cannot be merged into unchanged: {exc}"
        ) from None
    if not isinstance(loaded, dict):
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} does not hold a JSON object")
    return loaded


def _table(parent: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path}: {key!r} is not an object")
    return value


def _json_change(
    path: Path, merge: Callable[[dict[str, Any]], list[str]], *, removing: bool = False
) -> Change:
    """The file with `merge` done to its settings; removed when that left it an empty object
    (uninstalling what made it), unchanged when `merge` did nothing."""
    before = _read(path)
    if before is None and removing:
        return Change(path, None, None, [])
    data = _json_object(path, before)
    done = merge(data)
    if not done:
        return Change(path, before, before or "", done)
    if not data and not path.is_symlink():  # a link stays, its target holding `{}`
        return Change(path, before, None, done)
    return Change(path, before, json.dumps(data, indent=2, ensure_ascii=False) + "\n", done)


def _is_our_hook(hook: Any) -> bool:
    command = hook.get("command") if isinstance(hook, dict) else None
    try:
        return isinstance(command, str) and shlex.split(command)[-2:] == ["hook", "claude"]
    except ValueError:  # unbalanced quotes: someone else's command
        return False


def _gone(program: str) -> bool:
    """An absolute path to an `agentpost` that is no longer there (a moved virtualenv)."""
    path = Path(program)
    return path.is_absolute() and path.name == SERVER and not os.access(path, os.X_OK)


def _hook_program(hook: dict[str, Any]) -> str:
    return shlex.split(hook["command"])[0]


def _hooks_of(group: Any) -> list[Any]:
    """A hook group's hooks; none where someone else's group is not shaped as one."""
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return hooks if isinstance(hooks, list) else []


def claude_changes(project: Path, command: str) -> list[Change]:
    """The two files of a Claude Code project, merged with agentpost's server and hooks."""

    def add_server(data: dict[str, Any]) -> list[str]:
        servers = _table(data, "mcpServers", project / ".mcp.json")
        entry = servers.get(SERVER)
        if isinstance(entry, dict) and _gone(str(entry.get("command"))):
            entry["command"] = command
            return [f"repaired the MCP server {SERVER!r}: its agentpost is gone, now {command}"]
        if SERVER in servers:
            _check_startable(entry, f"{project / '.mcp.json'}: mcpServers.{SERVER}")
            return []
        servers[SERVER] = {"command": command, "args": ["mcp"]}
        return [f"added the MCP server {SERVER!r} ({command} mcp)"]

    hook_command = f"{shlex.quote(command)} hook claude"

    def add_hooks(data: dict[str, Any]) -> list[str]:
        path = project / ".claude" / "settings.json"
        hooks = _table(data, "hooks", path)
        done = []
        for event in HOOK_EVENTS:
            groups = hooks.setdefault(event, [])
            if not isinstance(groups, list):
                raise AgentpostError(
                    ErrorCode.INVALID_ARGUMENT, f"{path}: hooks.{event} is not a list"
                )
            ours = [h for g in groups for h in _hooks_of(g) if _is_our_hook(h)]
            for hook in ours:
                if _gone(_hook_program(hook)):
                    hook["command"] = hook_command
                    done.append(f"repaired the {event} hook: its agentpost is gone")
            if ours:
                continue
            group: dict[str, Any] = {"matcher": "*"} if event == "PostToolUse" else {}
            group["hooks"] = [
                {"type": "command", "command": hook_command, "timeout": HOOK_TIMEOUT_S}
            ]
            groups.append(group)
            done.append(f"added the {event} hook ({hook_command})")
        return done

    return [
        _json_change(project / ".mcp.json", add_server),
        _json_change(project / ".claude" / "settings.json", add_hooks),
    ]


def claude_removals(project: Path) -> list[Change]:
    """The two files of a Claude Code project without agentpost's server and hooks."""

    def remove_server(data: dict[str, Any]) -> list[str]:
        servers = data.get("mcpServers")
        if not isinstance(servers, dict) or SERVER not in servers:
            return []
        del servers[SERVER]
        if not servers:
            del data["mcpServers"]
        return [f"removed the MCP server {SERVER!r}"]

    def remove_hooks(data: dict[str, Any]) -> list[str]:
        hooks = data.get("hooks")
        if not isinstance(hooks, dict):
            return []
        done = []
        for event, groups in list(hooks.items()):
            if not isinstance(groups, list):
                continue
            kept_groups, removed = [], False
            for group in groups:
                listed = _hooks_of(group)
                kept = [h for h in listed if not _is_our_hook(h)]
                removed = removed or len(kept) < len(listed)
                if len(kept) < len(listed):
                    if not kept:
                        continue  # a group that held only ours
                    group["hooks"] = kept
                kept_groups.append(group)
            if removed:
                done.append(f"removed the {event} hook")
                groups[:] = kept_groups
                if not groups:
                    del hooks[event]
        if done and not hooks:
            del data["hooks"]
        return done

    settings = _json_change(project / ".claude" / "settings.json", remove_hooks, removing=True)
    return [
        _json_change(project / ".mcp.json", remove_server, removing=True),
        replace(settings, folder=project / ".claude"),
    ]


def codex_change(path: Path, command: str) -> Change:
    """`~/.codex/config.toml` with `[mcp_servers.agentpost]`, comments and all kept."""
    import tomllib

    import tomlkit  # here, so the rest of the command line starts without it
    from tomlkit.exceptions import TOMLKitError

    before = _read(path)
    document = _parse_toml(path, before)
    servers = _servers_of(path, document)
    if servers is not None and SERVER in servers:
        return _codex_repair(path, before, document, servers[SERVER], command)
    wanted = {"command": command, "args": ["mcp"]}
    expected = document.unwrap()
    expected.setdefault("mcp_servers", {})[SERVER] = wanted
    # A `[mcp_servers.agentpost]` table where it fits; where `mcp_servers` is an inline table or
    # dotted keys, a table in its midst would be refused or would take in the keys after it,
    # so there an inline table. Either way the result must read as theirs plus ours.
    for entry in (tomlkit.table(), tomlkit.inline_table()):
        merged = tomlkit.parse(before or "")
        if "mcp_servers" not in merged:
            merged["mcp_servers"] = tomlkit.table(is_super_table=True)
        entry.update(wanted)
        try:
            merged["mcp_servers"][SERVER] = entry
            after = _spaced(tomlkit.dumps(merged))
            if tomllib.loads(after) == expected:
                return Change(path, before, after, [f"added [mcp_servers.{SERVER}]"])
        except (TOMLKitError, ValueError):
            continue
    raise AgentpostError(
        ErrorCode.INVALID_ARGUMENT,
        f"{path}: cannot add [mcp_servers.{SERVER}] without changing the rest; add it by hand",
    )


def _spaced(text: str) -> str:
    """A blank line between our table and a table tomlkit put right after it, as between
    theirs (uninstall takes it out with the table)."""
    ours = f"[mcp_servers.{SERVER}]\n"
    start = text.find(ours)
    end = text.find("\n[", start + len(ours)) if start >= 0 else -1
    return text if end < 0 else f"{text[: end + 1]}\n{text[end + 1 :]}"


def _codex_repair(
    path: Path, before: str | None, document: Any, entry: Any, command: str
) -> Change:
    """An `agentpost` server kept as written, unless its command is an absolute path to an
    agentpost that is gone: then that one value is pointed at this one, every other byte kept."""
    import tomllib

    import tomlkit

    _check_startable(entry, f"{path}: [mcp_servers.{SERVER}]")
    if not isinstance(entry.get("command"), str) or not _gone(entry["command"]):
        return Change(path, before, before or "", [])
    expected = document.unwrap()
    expected["mcp_servers"][SERVER]["command"] = command
    entry["command"] = command
    after = tomlkit.dumps(document)
    if tomllib.loads(after) != expected:  # written otherwise than tomlkit edits cleanly
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{path}: cannot repair [mcp_servers.{SERVER}] (its agentpost is gone) without "
            "changing the rest; set its command by hand",
        )
    repaired = f"repaired [mcp_servers.{SERVER}]: its agentpost is gone, now {command}"
    return Change(path, before, after, [repaired])


_STARTS = ("command", "url")
"""What an entry starts its server with: a command, or (for an HTTP server) a URL."""


def _check_startable(entry: Any, where: str) -> None:
    """An entry kept as written must be one its client can start: else "already set up"."""
    if not isinstance(entry, dict) or not any(isinstance(entry.get(k), str) for k in _STARTS):
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{where} is neither a command nor a URL: fix it, or remove it and install again",
        )


def _parse_toml(path: Path, before: str | None) -> Any:
    """The config as a tomlkit document (keeping comments); refused unless TOML, in the
    standard library's words: tomlkit places an error at the end of the file at line 1,
    column 0, naming a NUL character the file does not hold."""
    import tomllib

    import tomlkit  # here, so the rest of the command line starts without it
    from tomlkit.exceptions import TOMLKitError

    try:
        tomllib.loads(before or "")
        return tomlkit.parse(before or "")
    except (tomllib.TOMLDecodeError, TOMLKitError) as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not TOML: {exc}") from None


def _servers_of(path: Path, document: Any) -> Any:
    servers = document.get("mcp_servers")
    if servers is not None and not isinstance(servers, dict):
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path}: mcp_servers is not a table")
    return servers


def codex_removal(path: Path) -> Change:
    """`~/.codex/config.toml` without `[mcp_servers.agentpost]`; the rest byte for byte."""
    import tomllib

    import tomlkit

    before = _read(path)
    if before is None:
        return Change(path, None, None, [])
    document = _parse_toml(path, before)
    servers = _servers_of(path, document)
    if servers is None or SERVER not in servers:
        return Change(path, before, before, [])
    expected = document.unwrap()
    del expected["mcp_servers"][SERVER]
    if not expected["mcp_servers"]:
        del expected["mcp_servers"]
    del servers[SERVER]
    if not servers:  # a table install made, or one that held only ours
        del document["mcp_servers"]
    # Install leaves a blank line before its table; taken out, it would trail the file.
    after: str | None = tomlkit.dumps(document).rstrip("\n")
    after = after + "\n" if after and after.strip() else None
    done = [f"removed [mcp_servers.{SERVER}]"]
    if after is None and not path.is_symlink():
        return Change(path, before, None, done)  # a file install made is gone again
    after = after or ""
    if tomllib.loads(after) != expected:  # written otherwise than tomlkit takes apart cleanly
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"{path}: cannot remove [mcp_servers.{SERVER}] without changing the rest; "
            "remove it by hand",
        )
    return Change(path, before, after, done)


def _stage(change: Change) -> tuple[Path, Path]:
    """The new text beside its file, with the file's permissions: (target, staged). A symlink
    (say, into a dotfiles repository) stays one and its target gets the change."""
    try:
        # A loop is told by the system (ELOOP); `resolve` raises on one only before Python 3.13.
        os.stat(change.path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink_loop(change.path) from None
    try:
        target = change.path.resolve()
    except RuntimeError:
        raise _symlink_loop(change.path) from None
    staged = target.with_name(f".{target.name}.agentpost-{os.getpid()}")
    assert change.after is not None  # a file to remove is not staged
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(change.after)
        if target.exists():
            os.chmod(staged, target.stat().st_mode & 0o7777)
    except OSError as exc:
        _discard(staged)
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT, f"cannot write {change.path}: {exc.strerror or exc}"
        ) from None
    return target, staged


def _symlink_loop(path: Path) -> AgentpostError:
    return AgentpostError(ErrorCode.INVALID_ARGUMENT, f"cannot write {path}: a symlink loop")


def _discard(staged: Path) -> None:
    with contextlib.suppress(OSError):
        staged.unlink(missing_ok=True)


def _write(changes: list[Change]) -> None:
    """Every file or none: each new text is staged first, and only once all are does each
    replace its file atomically."""
    staged: list[tuple[Path, Path]] = []
    try:
        for change in changes:
            if change.after is not None:
                staged.append(_stage(change))
    except AgentpostError:
        for _, partial in staged:
            _discard(partial)
        raise
    for target, partial in staged:
        os.replace(partial, target)
    for change in changes:
        if change.after is None:
            _remove(change)


def _remove(change: Change) -> None:
    try:
        change.path.unlink()
    except OSError as exc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT, f"cannot remove {change.path}: {exc.strerror or exc}"
        ) from None
    if change.folder is not None:
        with contextlib.suppress(OSError):  # not empty: someone else's files are in it
            change.folder.rmdir()


def apply(changes: list[Change], *, dry_run: bool, unchanged: str = "already set up") -> list[str]:
    """Write (or, dry, only describe) the changes; the lines to print."""
    lines: list[str] = []
    for change in changes:
        if not change.changed:
            lines.append(f"{change.path}: {unchanged}, unchanged")
        elif dry_run:
            lines.append(f"{change.path}: would change ({'; '.join(change.done)})")
            lines.append(change.diff().rstrip("\n"))
        else:
            lines.append(f"{change.path}: {'; '.join(change.done)}")
    if not dry_run:
        _write([change for change in changes if change.changed])
    return lines


install_app = typer.Typer(
    help="Set agentpost up in an agent client (merging into its settings).",
    no_args_is_help=True,
)
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the change; write nothing.")]
ProjectOption = Annotated[
    Path | None,
    typer.Option(
        "--project",
        exists=True,
        file_okay=False,
        help="The project folder (default: this repository's top, else here).",
    ),
]


def _report(
    changes: Callable[[], list[Change]], dry_run: bool, unchanged: str = "already set up"
) -> None:
    from agentpost.cli.render import refusal

    try:
        lines = apply(changes(), dry_run=dry_run, unchanged=unchanged)
    except AgentpostError as err:
        raise refusal(err) from None
    for line in lines:
        # Plain: paths and diffs must not be wrapped or coloured; a file someone else wrote
        # must not drive the terminal either.
        print(visible(line))


@install_app.command()
def claude(project: ProjectOption = None, dry_run: DryRun = False) -> None:
    """`.mcp.json` (the MCP server) and `.claude/settings.json` (the hooks) of a project."""
    root = project or project_root(Path.cwd())
    _report(lambda: claude_changes(root, executable()), dry_run)


uninstall_app = typer.Typer(
    help="Take agentpost out of an agent client's settings (what install added, nothing else).",
    no_args_is_help=True,
)


@uninstall_app.command("claude")
def uninstall_claude(project: ProjectOption = None, dry_run: DryRun = False) -> None:
    """Remove the MCP server from `.mcp.json` and the hooks from `.claude/settings.json`."""
    root = project or project_root(Path.cwd())
    _report(lambda: claude_removals(root), dry_run, unchanged="nothing of agentpost's")


@install_app.command()
def codex(dry_run: DryRun = False) -> None:
    r"""`\[mcp_servers.agentpost]` in `~/.codex/config.toml` ($CODEX_HOME if set)."""
    # The help reads its text as Rich markup: `\[` keeps the table's name from being a tag.
    _report(lambda: [codex_change(codex_config_path(os.environ), executable())], dry_run)


@uninstall_app.command("codex")
def uninstall_codex(dry_run: DryRun = False) -> None:
    r"""Remove `\[mcp_servers.agentpost]` from `~/.codex/config.toml` ($CODEX_HOME if set)."""
    path = codex_config_path(os.environ)
    _report(lambda: [codex_removal(path)], dry_run, unchanged="nothing of agentpost's")
