"""Where the settings file and the home live by default, and how a relative `home` (or SQLite
database) written in the file reads. Standard library only: `agentpost hook claude`, which must
not load pydantic, reads the file itself, and must read it as `agentpost.config.Settings` does."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def default_home() -> Path:
    return Path.home() / ".local" / "share" / "agentpost"


def default_config_path() -> Path:
    return Path.home() / ".config" / "agentpost" / "config.toml"


def config_file(environ: Mapping[str, str]) -> Path:
    """The TOML file read: `$AGENTPOST_CONFIG`, else the default."""
    return Path(environ.get("AGENTPOST_CONFIG") or default_config_path()).expanduser()


def home_in_file(home: str, config_file: Path) -> str:
    """A `home` written in the config file: a relative one is the file's own folder's, so every
    process reading one file shares one post office, whatever folder each was started in; an
    absolute one, or one under `~`, stays itself."""
    return home if home.startswith("~") else str(config_file.parent / home)


SQLITE = "sqlite:///"


def database_url_in_file(url: str, config_file: Path) -> str:
    """A `database_url` written in the config file: a relative `sqlite:///` path is the file's
    own folder's, as a relative `home` is. Taken from each process's working folder, agents
    started in different worktrees each opened a post office of their own and never saw each
    other's mail. No path, or `:memory:`, is left for the settings to refuse."""
    path = url.removeprefix(SQLITE)
    if path == url or path.startswith(("/", "~")) or path.strip() in ("", ":memory:"):
        return url
    return SQLITE + str(config_file.parent / path)


def said(value: object) -> bool:
    """Whether a setting's value says anything. An empty one (`AGENTPOST_AGENT=`, `agent = ""`
    in the file) says nothing: it is read as if it were not there, and the next place decides
    (the environment, then the config file, then the default), in every command alike."""
    return value != ""
