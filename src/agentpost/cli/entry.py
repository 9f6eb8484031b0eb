"""The `agentpost` executable, and `agentpost mcp` and `agentpost hook` on short paths.

An MCP client starts `agentpost mcp` for every agent session, so its start-up is the agent's
wait: that path skips the command line's own libraries (Typer, Rich) and goes straight to the
MCP face. `agentpost hook` runs on every prompt and tool call of a Claude Code session: it skips
even the settings (pydantic) and the event loop, so this module imports them only when serving.
Every other command loads the full command line.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from agentpost.domain.errors import AgentpostError, ErrorCode

if TYPE_CHECKING:
    from agentpost.config import Settings

EXIT_CODES = {
    ErrorCode.INVALID_ARGUMENT: 2,
    ErrorCode.UNAUTHENTICATED: 3,
    ErrorCode.FORBIDDEN: 3,
    ErrorCode.NOT_FOUND: 4,
    ErrorCode.UNKNOWN_RECIPIENT: 4,
    ErrorCode.GONE: 4,
    ErrorCode.CONFLICT: 5,
    ErrorCode.TOO_LARGE: 6,
    ErrorCode.RATE_LIMITED: 7,
    ErrorCode.INBOX_FULL: 7,
    ErrorCode.LOCKED_OUT: 7,
    ErrorCode.UNAVAILABLE: 8,
}


def key_for(url: str, key: str | None, settings: Settings) -> str:
    """The key a command speaks to the service at `url` with: `--key`, else the configured
    key if it is for that service. Without one, the service would answer every request with
    `Authorization` advice; the command line says which option or setting is missing (after
    a mistake in the URL itself, which is the one to fix first)."""
    from agentpost.client.wire import check_service_url

    check_service_url(url)
    key = key or settings.key_for(url)
    if key:
        return key
    elsewhere = (
        f" (AGENTPOST_KEY is for {settings.url} only)" if settings.key and settings.url else ""
    )
    raise AgentpostError(
        ErrorCode.UNAUTHENTICATED,
        f"no key for the post office at {url}: pass --key, or set AGENTPOST_KEY{elsewhere}",
    )


def serve_mcp(url: str | None = None, key: str | None = None) -> int:
    """Serve this session over stdio, on the local post office or, given a URL (the option, else
    the `url` setting), on that remote service; returns the exit status (refusals go to stderr).

    The remote face is imported only when a URL is given: the local start never loads the client.
    """
    import anyio

    from agentpost.config import load_settings

    try:
        settings = load_settings()
        if key is not None and not (url or settings.url):
            raise AgentpostError(
                ErrorCode.INVALID_ARGUMENT, "--key is for a remote post office: add --url"
            )
        if service := url or settings.url:
            settings = settings.model_copy(
                update={"url": service, "key": key_for(service, key, settings)}
            )
            from agentpost.mcp.remote import serve_remote_stdio

            anyio.run(serve_remote_stdio, settings)
        else:
            from agentpost.mcp.stdio import serve_stdio

            anyio.run(serve_stdio, settings)
    except AgentpostError as err:  # e.g. a name off the roster, a refused key, bad config
        print(f"error: {err.code.value}: {err.message}", file=sys.stderr)
        return EXIT_CODES[err.code]
    return 0


def main() -> None:
    if sys.argv[1:] == ["mcp"]:
        raise SystemExit(serve_mcp())
    if sys.argv[1:2] == ["hook"]:
        from agentpost.cli.hook import main as hook

        raise SystemExit(hook(sys.argv[2:]))
    if sys.argv[1:] == ["guard", "check"]:  # every commit waits for it: no full command line
        import os

        from agentpost.cli.guard import check

        raise SystemExit(check(os.environ))
    from agentpost.cli.main import command_line

    raise SystemExit(command_line(sys.argv[1:]))
