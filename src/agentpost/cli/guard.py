"""`agentpost guard install|uninstall|check`: a git pre-commit hook that honours reservations.

`install` writes a `pre-commit` hook into the repository's hooks folder (`core.hooksPath` when
set, else the common git dir's `hooks`, which every worktree shares). The hook runs `agentpost
guard check` by the absolute path of this installation, so it works whatever PATH a git client
starts it with. A `pre-commit` hook that is not ours is never overwritten: it is chained, kept as
`pre-commit.before-agentpost` and run after the check (with the same arguments), and
`uninstall` puts it back. Running `install` again only refreshes our hook.

`check` lists the staged files and refuses the commit (exit 1) when another agent holds one of
them exclusively in this project, naming the path, the holder and until when. The committing
agent is `AGENTPOST_AGENT`, else the agent of the live local `agentpost mcp` session started by
the same parent as one of the commit's ancestors (Claude Code starts both; the hook's lookup), so
two agents sharing a worktree are held to each other's reservations; only when neither names one
are the reservations made from this worktree yours. The project is `AGENTPOST_PROJECT`, else that
session's (an `env` of the client's settings for the server names it there alone), else the
worktree's. It reads the post office the agents working here use: the one Claude Code's
`agentpost` server names for this worktree, else Codex's `[mcp_servers.agentpost]` (see
`agent_servers`: the hook's environment is not the one the client gives that server), else the
one of the committer's own settings: the local file, or the service of
`AGENTPOST_URL`/`AGENTPOST_KEY`. A service knows no local processes:
there the committer is `AGENTPOST_AGENT`, else the key's agent (an admin key's owner names none).
A service named without a key for it here refuses the commit, saying what to set: checking
another post office in its place, or none, would pass as checked a commit nobody checked. When
the post office cannot be read otherwise, whatever the reason (a service away, a bad config
file), it warns and lets the commit through: reservations are advisory, and a broken guard must
not stop work.
`AGENTPOST_GUARD=off` bypasses it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from agentpost.cli.entry import EXIT_CODES
from agentpost.cli.literal import visible
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.names import OWNER

if TYPE_CHECKING:  # the check loads what it needs when it runs: install stays quick
    from agentpost.client import AsyncClient
    from agentpost.config import Settings
    from agentpost.domain.reservations import Reservation
    from agentpost.services import PostOffice
    from agentpost.services.local_identity import LocalContext

MARKER = "# agentpost-guard"
CHAINED = "pre-commit.before-agentpost"
GIT_TIMEOUT_S = 10
OFF = frozenset({"off", "0", "false", "no"})

guard_app = typer.Typer(
    help="A git pre-commit hook that refuses commits touching files another agent holds.",
    no_args_is_help=True,
)


def _fail(code: ErrorCode, message: str) -> typer.Exit:
    typer.echo(f"error: {code.value}: {message}", err=True)
    return typer.Exit(EXIT_CODES[code])


def _git(*args: str, cwd: Path | None = None) -> str:
    from agentpost.services.local_identity import run_git

    done = run_git(cwd, *args, timeout=GIT_TIMEOUT_S)
    if done is None:
        raise AgentpostError(ErrorCode.UNAVAILABLE, "git could not run")
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or ["git failed"]
        raise AgentpostError(ErrorCode.INVALID_ARGUMENT, f"not inside a git repository ({said[0]})")
    return done.stdout


def hooks_dir(cwd: Path | None = None) -> Path:
    """Where git looks for this repository's hooks: `core.hooksPath`, else the common dir's."""
    return Path(_git("rev-parse", "--path-format=absolute", "--git-path", "hooks", cwd=cwd).strip())


def agentpost_command() -> list[str]:
    """This installation's `agentpost`, by absolute path (a hook's PATH may not find it)."""
    script = Path(sys.executable).with_name("agentpost")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    started = Path(sys.argv[0])
    if started.name == "agentpost" and started.is_file():
        return [str(started.absolute())]
    runner = "from agentpost.cli.entry import main; main()"
    return [str(Path(sys.executable).absolute()), "-c", runner]


def hook_script() -> str:
    """The hook; should this installation go away, it warns and lets commits through, as the
    check does when it cannot read the post office."""
    program, *rest = agentpost_command()
    command = " ".join(shlex.quote(part) for part in [program, *rest, "guard", "check"])
    # The script itself, or the Python it was installed into (then: can it still import it?).
    there = (
        f"[ -x {shlex.quote(program)} ]"
        if not rest
        else f"{shlex.quote(program)} -c 'import agentpost' 2>/dev/null"
    )
    gone = (
        f"agentpost guard: reservations not checked ({program} is gone; install the guard "
        "again, or remove this hook); committing anyway"
    )
    return f"""#!/bin/sh
{MARKER}: refuses a commit touching files another agent holds exclusively.
# Written by `agentpost guard install`; `agentpost guard uninstall` removes it.
# Bypass once: AGENTPOST_GUARD=off git commit ...
if {there}; then
    {command} || exit $?
else
    echo {shlex.quote(gone)} >&2
fi
chained="$(dirname "$0")/{CHAINED}"
if [ -x "$chained" ]; then
    exec "$chained" "$@"
fi
"""


def is_ours(hook: Path) -> bool:
    try:
        return MARKER.encode() in hook.read_bytes()
    except OSError:
        return False


@contextmanager
def _hooks_folder(hooks: Path) -> Iterator[None]:
    """A hooks folder git names but we cannot change (a file in its place, no permission) is
    refused by name, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise AgentpostError(
            ErrorCode.INVALID_ARGUMENT,
            f"cannot change the hooks in {hooks}: {exc.strerror or exc}",
            details={"path": str(hooks)},
        ) from None


def install(cwd: Path | None = None) -> str:
    """Write (or refresh) our hook; what was done, in a sentence."""
    hooks = hooks_dir(cwd)
    hook, chained = hooks / "pre-commit", hooks / CHAINED
    note = ""
    with _hooks_folder(hooks):
        hooks.mkdir(parents=True, exist_ok=True)
        if hook.exists() or hook.is_symlink():
            if is_ours(hook):
                note = " (refreshed)"
            elif chained.exists() or chained.is_symlink():
                raise AgentpostError(
                    ErrorCode.CONFLICT,
                    f"{hook} is not agentpost's, and {chained.name} is taken: move one of them "
                    "away, then install again",
                )
            else:
                hook.rename(chained)
                note = f"; your hook runs after it, kept as {chained}"
        hook.write_text(hook_script())
        hook.chmod(0o755)
    return f"agentpost guard installed in {hook}{note}{_per_worktree(cwd)}"


def _per_worktree(cwd: Path | None) -> str:
    """A relative `core.hooksPath` names a folder in each worktree: a hook written into this
    one's guards no other (the shared hooks folder guards them all)."""
    from agentpost.services.local_identity import run_git

    done = run_git(cwd, "config", "--get", "core.hooksPath", timeout=GIT_TIMEOUT_S)
    named = done.stdout.strip() if done is not None and done.returncode == 0 else ""
    if not named or named.startswith("~") or Path(named).is_absolute():
        return ""
    return (
        f"; core.hooksPath ({named}) is relative, a folder of each worktree: this guards this "
        "worktree only, run agentpost guard install in each of the others too"
    )


def uninstall(cwd: Path | None = None) -> str:
    """Remove our hook only, putting a chained one back."""
    hooks = hooks_dir(cwd)
    hook, chained = hooks / "pre-commit", hooks / CHAINED
    if not is_ours(hook):
        return f"no agentpost guard in {hooks}: nothing to remove"
    with _hooks_folder(hooks):
        hook.unlink()
        if chained.exists() or chained.is_symlink():
            chained.rename(hook)
            return f"agentpost guard removed from {hook}; your own hook is back in its place"
    return f"agentpost guard removed from {hook}"


def staged_files() -> list[str]:
    try:
        listed = _git("diff", "--cached", "--name-only", "--no-renames", "-z")
    except AgentpostError:
        # Outside a repository `git diff` only says it knows no --cached: let git say where.
        _git("rev-parse", "--git-dir")
        raise
    return [path for path in listed.split("\0") if path]


async def _read_post_office(
    settings: Settings, project: str
) -> tuple[str | None, str, list[Reservation]]:
    """(the committing agent, its project, the project's live reservations), as `acting_here`
    reads them; no agent when nothing names one: then the worktree says which reservations are
    yours."""
    if settings.url:  # a remote post office knows no local processes, but the key's agent
        from agentpost.client import AsyncClient

        async with AsyncClient(settings.url, settings.key) as client:
            return (
                await _key_agent(client, settings),
                project,
                await client.reservations(project=project),
            )
    from agentpost.services import PostOffice

    office = await PostOffice.open(settings)
    try:
        agent, project = await acting_here(office, settings, project)
        return agent, project, await office.reservations.live(project)
    finally:
        await office.aclose()


async def _key_agent(client: AsyncClient, settings: Settings) -> str | None:
    """The committer on a remote post office: AGENTPOST_AGENT, else the key's agent. A
    worktree's path says nothing there of whose it is (two containers each hold theirs at
    /workspace), so it decides only for the owner's key, the person at the command line,
    who has no agent of its own, as locally."""
    if settings.agent:
        return settings.agent
    name = (await client.me()).name
    return None if name == OWNER else name


async def acting_here(
    office: PostOffice, settings: Settings, project: str
) -> tuple[str | None, str]:
    """(the agent, the project) this process acts for on the local post office, as the guard
    reads them for a commit and `agentpost reservations` for its listing: AGENTPOST_AGENT, else
    the agent of the live local `agentpost mcp` the same Claude Code started (see
    `PresenceService.session_of_process`), else None; AGENTPOST_PROJECT, else that session's (the
    client's settings may have named it for the server alone), else `project`, the worktree's."""
    agent = settings.agent
    session = await office.presence.session_of_process(os.getpid())
    if session is not None:
        agent = agent or session.agent
        if settings.project is None and session.project:
            project = session.project
    return agent, project


def _the_agents_office(
    settings: Settings, context: LocalContext, environ: Mapping[str, str]
) -> tuple[Settings, LocalContext]:
    """The settings and context of the post office the agents committing here use, as Claude
    Code's or Codex's settings name it for the worktree (see `agent_servers`): its project too,
    when the entry gives its server one."""
    from dataclasses import replace

    from agentpost.cli.agent_servers import office_settings
    from agentpost.domain.names import slugify

    folder = Path(context.folder or context.worktree)
    found = office_settings(folder, environ, settings)
    if found.project is not None and found.project != settings.project:
        context = replace(context, project=slugify(found.project))
    return found, context


def check(environ: Mapping[str, str]) -> int:
    """The hook's verdict on the staged files: 0 lets the commit through, 1 refuses it."""
    if environ.get("AGENTPOST_GUARD", "").strip().lower() in OFF:
        return 0
    import anyio

    from agentpost.cli.agent_servers import MissingHere
    from agentpost.config import load_settings
    from agentpost.domain.reservations import held_against
    from agentpost.services.local_identity import detect

    try:
        staged = staged_files()
        if not staged:
            return 0
        settings = load_settings()
        context = detect(project_override=settings.project)
        try:
            settings, context = _the_agents_office(settings, context, environ)
        except MissingHere as exc:
            typer.echo(
                f"agentpost guard: reservations cannot be checked ({exc.code.value}: "
                f"{exc.message}); commit refused: commit anyway with AGENTPOST_GUARD=off",
                err=True,
            )
            return EXIT_CODES[exc.code]
        agent, project, held = anyio.run(_read_post_office, settings, context.project)
    except Exception as exc:  # a bad config, an unreadable store, no git: never stop the commit
        if isinstance(exc, AgentpostError):
            why = f"{exc.code.value}: {exc.message}"
        else:
            why = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        typer.echo(
            f"agentpost guard: reservations not checked ({why}); committing anyway", err=True
        )
        return 0
    refused = held_against(staged, held, agent=agent, worktree=context.worktree)
    if not refused:
        return 0
    lines = [
        "agentpost guard: this commit touches files another agent holds exclusively "
        f"(project {project}):"
    ]
    for path, r in refused:
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(r.expires_at))
        why = f" ({visible(json.dumps(r.reason, ensure_ascii=False))})" if r.reason else ""
        lines.append(f"  {visible(path)}: held by {r.agent} as {r.path!r} until {until}{why}")
    holders = sorted({r.agent for _, r in refused})
    lines.append(
        f"Ask {', '.join(holders)} (agentpost send {holders[0]} ...), wait for the reservation "
        "to end, or commit anyway with AGENTPOST_GUARD=off."
    )
    typer.echo("\n".join(lines), err=True)
    return 1


@guard_app.command("install")
def install_command() -> None:
    """Add the pre-commit hook to this repository (all its worktrees); chains an existing one."""
    try:
        typer.echo(install())
    except AgentpostError as err:
        raise _fail(err.code, err.message) from None


@guard_app.command("uninstall")
def uninstall_command() -> None:
    """Remove agentpost's pre-commit hook (a hook it chained is put back)."""
    try:
        typer.echo(uninstall())
    except AgentpostError as err:
        raise _fail(err.code, err.message) from None


@guard_app.command("check")
def check_command() -> None:
    """What the hook runs: refuse (exit 1) if a staged file is held exclusively by another agent."""
    raise typer.Exit(check(os.environ))
