"""Which post office the agents of a repository use, as their MCP client's settings name it:
Claude Code's, else Codex's.

The commit guard runs in a git hook, whose environment is the committer's, not the one the
client gives the `agentpost` MCP server: a remote post office named only in the server's entry
(`agentpost mcp --url URL` with the key in its `env`, or an HTTP entry with an `Authorization`
header) is nowhere in the hook's `AGENTPOST_URL`. Reading the local file instead, the guard saw
none of the remote claims and let every commit through. So it reads the entry the agents'
client reads. Only the server named `agentpost` counts: the name install and the README give it,
and the one the tools are known by (`mcp__agentpost__reserve`); an HTTP entry under another name
could be any MCP server.

Claude Code: the `agentpost` server of the local scope (`~/.claude.json` under the worktree's
folder, where `claude mcp add` puts it), else of the project's `.mcp.json`, else of the user
scope (`~/.claude.json`), as Claude Code itself lets the narrower scope win. Codex, when no
Claude Code scope names one: `[mcp_servers.agentpost]` of the project's `.codex/config.toml`
(Codex reads it for a trusted project; here whenever it is there), else of
`$CODEX_HOME/config.toml` (`~/.codex/config.toml`). The first Codex file holding that table
decides, as Codex lays the project's over the user's: `enabled = false` there switches the
server off, and then Codex names no post office. Claude Code's scopes come first, the order the
guard read before it knew Codex, so a setup it checked keeps its verdict; a repository whose
Claude Code and Codex name two post offices is checked against Claude Code's only.

The entry is read as its server would see it. Claude Code fills in `${VAR}` and
`${VAR:-default}` from the committer's environment; Codex takes every value as written. For a
command, `--url`/`--key` in its arguments first, then its `env`, then the committer's own
settings (which a server started from it inherits); an entry that names no service leaves the
post office to those settings, as it leaves it to the server. (Codex hands its server only a few
of its own variables, and those `env_vars` lists: the committer's settings are read whole all
the same, a gap that matters only where the committer's shell names another post office.) An
HTTP entry's service is its URL without `/mcp`, its key the bearer token its client sends:
Claude Code's `headers`; Codex's `bearer_token_env_var` (the name of the variable holding the
token), else the `Authorization` of `env_http_headers` (header name to variable name), else of
`http_headers`: Codex lets each override the ones after it. When a service is named but the key
(or a variable the entry takes it from) is missing here, that is `MissingHere`: the guard must
neither ask another post office in its place nor pass the commit as checked. A settings file
that cannot be read, or is not JSON or TOML, is refused by name. Keys are never put into a
message.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Entry:
    """The `agentpost` server of one client's settings, where it is written, and whether that
    client fills in `${VAR}`s (Claude Code does, Codex does not)."""

    fields: dict[str, Any]
    where: str
    expands: bool = True

    def text(self, value: Any, environ: Mapping[str, str], field: str) -> str | None:
        """A string of the entry as its client passes it on; None for what is not a string."""
        if not isinstance(value, str):
            return None
        return _expand(value, environ, self.where, field) if self.expands else value


def claude_json(environ: Mapping[str, str]) -> Path:
    """Claude Code's own file of local and user scopes: `$CLAUDE_CONFIG_DIR/.claude.json`,
    else `~/.claude.json`."""
    folder = environ.get("CLAUDE_CONFIG_DIR")
    return Path(folder).expanduser() / ".claude.json" if folder else Path.home() / ".claude.json"


def codex_config_path(environ: Mapping[str, str]) -> Path:
    """Codex's user settings: `$CODEX_HOME/config.toml`, else `~/.codex/config.toml`."""
    home = environ.get("CODEX_HOME")
    return (Path(home) if home else Path.home() / ".codex") / "config.toml"


def _read(path: Path) -> str | None:
    """A settings file's text; None when there is no file. One that cannot be read is refused
    by name: which post office it names is unknown then."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"cannot read {path}: {why}") from None


def _load(path: Path) -> dict[str, Any]:
    """A JSON settings file's object; none when there is no file."""
    if (text := _read(path)) is None:
        return {}
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not JSON: {exc}") from None
    return loaded if isinstance(loaded, dict) else {}


def _load_toml(path: Path) -> dict[str, Any]:
    """A TOML settings file's table; none when there is no file."""
    if (text := _read(path)) is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"{path} is not TOML: {exc}") from None


def _ours(scope: Any, servers: str = "mcpServers") -> dict[str, Any] | None:
    listed = scope.get(servers) if isinstance(scope, dict) else None
    entry = listed.get(SERVER) if isinstance(listed, dict) else None
    return entry if isinstance(entry, dict) else None


def agentpost_entry(folder: Path, environ: Mapping[str, str]) -> Entry | None:
    """The `agentpost` server entry an agent started in `folder` uses: Claude Code's, else
    Codex's; None when no settings name one (or Codex's is switched off)."""
    return _claude_entry(folder, environ) or _codex_entry(folder, environ)


def _claude_entry(folder: Path, environ: Mapping[str, str]) -> Entry | None:
    user_file = claude_json(environ)
    user = _load(user_file)
    projects = user.get("projects")
    local = projects.get(str(folder)) if isinstance(projects, dict) else None
    if (entry := _ours(local)) is not None:
        return Entry(entry, f"{user_file} (for {folder})")
    project_file = folder / ".mcp.json"  # read only when no local entry outranks it
    if (entry := _ours(_load(project_file))) is not None:
        return Entry(entry, str(project_file))
    if (entry := _ours(user)) is not None:
        return Entry(entry, str(user_file))
    return None


def _codex_entry(folder: Path, environ: Mapping[str, str]) -> Entry | None:
    """The first of the project's and the user's Codex files to hold the table decides."""
    for path in (folder / ".codex" / "config.toml", codex_config_path(environ)):
        if (entry := _ours(_load_toml(path), "mcp_servers")) is not None:
            on = entry.get("enabled") is not False
            return Entry(entry, str(path), expands=False) if on else None
    return None


def _expand(value: str, environ: Mapping[str, str], where: str, field: str) -> str:
    """A string of the entry with its `${VAR}`s filled in as Claude Code fills them."""

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


def remote_settings(entry: Entry, environ: Mapping[str, str], settings: Settings) -> Settings:
    """`settings` with the url, key and project the entry's server would use; unchanged when
    the entry names no service (its server then reads the committer's settings too)."""
    fields, where = entry.fields, entry.where
    if not isinstance(fields.get("command"), str) and isinstance(fields.get("url"), str):
        return _http_settings(entry, environ, settings)
    args = fields.get("args")
    words = [fields.get("command"), *(args if isinstance(args, list) else [])]
    given_env = fields.get("env")
    env: dict[str, Any] = given_env if isinstance(given_env, dict) else {}

    def setting(name: str, field: str, otherwise: str | None) -> str | None:
        if name not in env:  # the server inherits the committer's
            return otherwise
        return entry.text(env[name], environ, field) or None

    named = setting("AGENTPOST_URL", "URL", settings.url)
    url = entry.text(_option(words, "--url"), environ, "URL") or named
    if not url:  # the local post office (the entry may blank the committer's AGENTPOST_URL)
        return settings.model_copy(update={"url": None}) if settings.url else settings
    inherited = settings.model_copy(
        update={
            "url": named,
            "key": setting("AGENTPOST_KEY", "key", settings.key),
            "project": setting("AGENTPOST_PROJECT", "project", settings.project),
        }
    )
    key = entry.text(_option(words, "--key"), environ, "key")
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


def _http_settings(entry: Entry, environ: Mapping[str, str], settings: Settings) -> Settings:
    """A Streamable HTTP entry: the service is its URL without `/mcp`, the key its bearer token
    (else the committer's key for that service)."""
    given = entry.text(entry.fields["url"], environ, "URL") or ""
    parts = urlsplit(given)
    if parts.path.rstrip("/") != MCP_PATH or not parts.netloc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"the agentpost server in {entry.where} is at {_shown(given)!r}, not at a service's "
            f"{MCP_PATH}: which post office it is cannot be told",
        )
    url = f"{parts.scheme}://{parts.netloc}"
    named = f"the agentpost server in {entry.where} is"
    key = _bearer(entry, environ)
    return settings.model_copy(update={"url": url, "key": _key(url, key, settings, named)})


def _bearer(entry: Entry, environ: Mapping[str, str]) -> str | None:
    """The token of the `Authorization: Bearer` the entry's client sends; None without one."""
    fields = entry.fields
    if entry.expands:  # Claude Code's headers, `${VAR}`s filled in
        said = entry.text(_authorization(fields.get("headers")), environ, "key")
    elif isinstance(variable := fields.get("bearer_token_env_var"), str):
        return _variable(entry, environ, variable, "bearer_token_env_var")
    elif isinstance(variable := _authorization(fields.get("env_http_headers")), str):
        said = _variable(entry, environ, variable, "env_http_headers")
    else:
        said = entry.text(_authorization(fields.get("http_headers")), environ, "key")
    scheme, _, token = (said or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _authorization(headers: Any) -> Any:
    """The value of a table of headers' `Authorization` (named in any case, the last given)."""
    found = None
    for name, value in headers.items() if isinstance(headers, dict) else ():
        if str(name).lower() == "authorization":
            found = value
    return found


def _variable(entry: Entry, environ: Mapping[str, str], name: str, field: str) -> str:
    """The value of the variable a Codex entry names for its key, or `MissingHere` naming it."""
    if value := environ.get(name, "").strip():
        return value
    raise MissingHere(
        ErrorCode.INVALID_ARGUMENT,
        f"the agentpost server in {entry.where} takes its key from the variable {name!r} (its "
        f"{field}), which is not set here",
    )


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
    entry = agentpost_entry(folder, environ)
    if entry is not None:
        return remote_settings(entry, environ, settings)
    if settings.url:
        key = _key(settings.url, None, settings, "AGENTPOST_URL names")
        return settings.model_copy(update={"key": key})
    return settings
