"""Which post office the agents of a repository use, as Claude Code's settings name it.

The commit guard runs in a git hook, whose environment is the committer's, not the one Claude
Code gives the `agentpost` MCP server: a remote post office named only in the server's entry
(`agentpost mcp --url URL` with the key in its `env`, or a `"type": "http"` entry with an
`Authorization` header) is nowhere in the hook's `AGENTPOST_URL`. Reading the local file instead,
the guard saw none of the remote claims and let every commit through. So it reads the entry the
agents' Claude Code reads: the `agentpost` server of the local scope (`~/.claude.json` under the
worktree's folder, where `claude mcp add` puts it), else of the project's `.mcp.json`, else of
the user scope (`~/.claude.json`), as Claude Code itself lets the narrower scope win. Only the
server named `agentpost` counts: the name install and the README give it, and the one the
tools are known by (`mcp__agentpost__reserve`); an HTTP entry under another name could be any
MCP server.

The entry is read as its server would see it: `${VAR}` and `${VAR:-default}` expanded from the
committer's environment; for a command, `--url`/`--key` in its arguments first, then its `env`,
then the committer's own settings (which a server started from it inherits); an entry that names
no service leaves the post office to those settings, as it leaves it to the server. When a
service is named but the key (or a variable the entry spells it with) is missing here, that is
`MissingHere`: the guard must neither ask another post office in its place nor pass the commit as
checked. Keys are never put into a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentpost.domain.errors import AgentpostError, ErrorCode

if TYPE_CHECKING:
    from agentpost.config import Settings

SERVER = "agentpost"
MCP_PATH = "/mcp"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingHere(AgentpostError):
    """The post office the agents use is named, but what it takes to ask it is not set in the
    committer's environment."""


def claude_json(environ: Mapping[str, str]) -> Path:
    """Claude Code's own file of local and user scopes: `$CLAUDE_CONFIG_DIR/.claude.json`,
    else `~/.claude.json`."""
    folder = environ.get("CLAUDE_CONFIG_DIR")
    return Path(folder).expanduser() / ".claude.json" if folder else Path.home() / ".claude.json"


def _load(path: Path) -> dict[str, Any]:
    """A settings file's object; none when there is no file. One that cannot be read is refused
    by name: which post office it names is unknown then."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"cannot read {path}: {why}") from None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not JSON: {exc}") from None
    return loaded if isinstance(loaded, dict) else {}


def _ours(scope: Any) -> dict[str, Any] | None:
    servers = scope.get("mcpServers") if isinstance(scope, dict) else None
    entry = servers.get(SERVER) if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def agentpost_entry(folder: Path, environ: Mapping[str, str]) -> tuple[dict[str, Any], str] | None:
    """(the `agentpost` server entry Claude Code started in `folder` uses, where it is written),
    or None when no scope names one."""
    user_file = claude_json(environ)
    user = _load(user_file)
    projects = user.get("projects")
    local = projects.get(str(folder)) if isinstance(projects, dict) else None
    if (entry := _ours(local)) is not None:
        return entry, f"{user_file} (for {folder})"
    project_file = folder / ".mcp.json"  # read only when no local entry outranks it
    if (entry := _ours(_load(project_file))) is not None:
        return entry, str(project_file)
    if (entry := _ours(user)) is not None:
        return entry, str(user_file)
    return None


def _expand(value: Any, environ: Mapping[str, str], where: str, field: str) -> str | None:
    """A string of the entry with its `${VAR}`s filled in as Claude Code fills them; None for
    what is not a string."""
    if not isinstance(value, str):
        return None

    def fill(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if default is not None and not found:
            return default
        if found is not None:
            return found
        raise MissingHere(
            ErrorCode.INVALID_ARGUMENT,
            f"the agentpost server in {where} takes its {field} from ${{{name}}}, which is not "
            "set here",
        )

    return _VARIABLE.sub(fill, value)


def _option(words: list[Any], name: str) -> Any:
    """The value of `--name VALUE` or `--name=VALUE` among a command's words (the last given,
    as the command line takes it); None when absent."""
    found = None
    for i, word in enumerate(words):
        if not isinstance(word, str):
            continue
        if word == name and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(f"{name}="):
            found = word.removeprefix(f"{name}=")
    return found


def remote_settings(
    entry: dict[str, Any], where: str, environ: Mapping[str, str], settings: Settings
) -> Settings:
    """`settings` with the url, key and project the entry's server would use; unchanged when
    the entry names no service (its server then reads the committer's settings too)."""
    if not isinstance(entry.get("command"), str) and isinstance(entry.get("url"), str):
        return _http_settings(entry, where, environ, settings)
    args = entry.get("args")
    words = [entry.get("command"), *(args if isinstance(args, list) else [])]
    given_env = entry.get("env")
    env: dict[str, Any] = given_env if isinstance(given_env, dict) else {}

    def setting(name: str, field: str, otherwise: str | None) -> str | None:
        if name not in env:  # the server inherits the committer's
            return otherwise
        return _expand(env[name], environ, where, field) or None

    named = setting("AGENTPOST_URL", "URL", settings.url)
    url = _expand(_option(words, "--url"), environ, where, "URL") or named
    if not url:  # the local post office (the entry may blank the committer's AGENTPOST_URL)
        return settings.model_copy(update={"url": None}) if settings.url else settings
    inherited = settings.model_copy(
        update={
            "url": named,
            "key": setting("AGENTPOST_KEY", "key", settings.key),
            "project": setting("AGENTPOST_PROJECT", "project", settings.project),
        }
    )
    key = _expand(_option(words, "--key"), environ, where, "key")
    uses = f"the agentpost server in {where} uses"
    return inherited.model_copy(update={"url": url, "key": _key(url, key, inherited, uses)})


def _key(url: str, key: str | None, settings: Settings, named: str) -> str:
    """The key for `url` as `agentpost mcp` picks it, or `MissingHere` saying where to set one
    (`named`: what names the post office, as the sentence's start)."""
    from agentpost.cli.entry import key_for

    try:
        return key_for(url, key, settings)
    except AgentpostError as exc:
        if exc.code is not ErrorCode.UNAUTHENTICATED:
            raise
        raise MissingHere(
            ErrorCode.UNAUTHENTICATED,
            f"{named} the post office at {_shown(url)}, and no key for it is set here: set "
            "AGENTPOST_KEY to your agent's key there (and AGENTPOST_URL to that post office)",
        ) from None


def _http_settings(
    entry: dict[str, Any], where: str, environ: Mapping[str, str], settings: Settings
) -> Settings:
    """A Streamable HTTP entry: the service is its URL without `/mcp`, the key its bearer token
    (else the committer's key for that service)."""
    given = _expand(entry["url"], environ, where, "URL") or ""
    parts = urlsplit(given)
    if parts.path.rstrip("/") != MCP_PATH or not parts.netloc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"the agentpost server in {where} is at {_shown(given)!r}, not at a service's "
            f"{MCP_PATH}: which post office it is cannot be told",
        )
    url = f"{parts.scheme}://{parts.netloc}"
    given_headers = entry.get("headers")
    headers: dict[str, Any] = given_headers if isinstance(given_headers, dict) else {}
    key = None
    for name, value in headers.items():
        if str(name).lower() == "authorization":
            said = _expand(value, environ, where, "key") or ""
            scheme, _, token = said.strip().partition(" ")
            key = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    named = f"the agentpost server in {where} is"
    return settings.model_copy(update={"url": url, "key": _key(url, key, settings, named)})


def _shown(url: str) -> str:
    """A URL fit to print: a password written into it is left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username}:***@{host}").geturl()


def office_settings(folder: Path, environ: Mapping[str, str], settings: Settings) -> Settings:
    """The settings that name the post office the agents working in `folder` use: with a key
    whenever they name a service (`MissingHere` otherwise)."""
    found = agentpost_entry(folder, environ)
    if found is not None:
        return remote_settings(*found, environ, settings)
    if settings.url:
        key = _key(settings.url, None, settings, "AGENTPOST_URL names")
        return settings.model_copy(update={"key": key})
    return settings
