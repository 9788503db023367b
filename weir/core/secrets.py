"""Secrets: where the cluster token comes from, and keeping secrets off command lines.

Any local user can read another process's command line (``/proc/PID/cmdline``), so a
secret passed as ``-D key=value`` to a daemon is public. Secrets travel in the environment
(readable only by the process's owner) or in files only their owner can read.

Example:
    >>> from weir.core.config import Configuration
    >>> auth_token(Configuration.from_pairs({"security.auth.token": "t0k"}))
    't0k'
    >>> split_secrets(["security.auth.token=t0k", "parallelism.default=2"])
    (['parallelism.default=2'], {'WEIR_SECURITY_AUTH_TOKEN': 't0k'})
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path

from weir.core import options
from weir.core.config import Configuration, all_options
from weir.core.errors import ConfigError

#: Options whose values must never appear on a command line.
SECRET_KEYS = frozenset({"security.auth.token", "s3.secret-key"})


def auth_token(conf: Configuration) -> str | None:
    """The cluster token: ``security.auth.token`` (config, ``-D`` or the environment), else
    the first line of ``security.auth.token-file``; None when neither is set."""
    token = conf.get(options.AUTH_TOKEN)
    if token:
        return token
    path = conf.get(options.AUTH_TOKEN_FILE)
    if not path:
        return None
    return read_secret_file(Path(path), options.AUTH_TOKEN_FILE.key) or None


def read_secret_file(path: Path, key: str) -> str:
    """The first line of ``path``, which only its owner may be able to read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        msg = f"{key} {path} cannot be read: {err.strerror or err}"
        raise ConfigError(msg) from err
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        msg = (f"{key} {path} is readable by other users (mode {stat.filemode(mode)}): "
               f"restrict it with `chmod 600 {path}`")
        raise ConfigError(msg)
    return text.splitlines()[0].strip() if text.strip() else ""


def split_secrets(dynamic: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Split ``-D key=value`` pairs into those safe for a child's command line and the
    environment variables that carry the secret ones instead."""
    public: list[str] = []
    env: dict[str, str] = {}
    registry = all_options()
    for pair in dynamic:
        key, _, value = pair.partition("=")
        option = registry.get(key.strip())
        if option is not None and option.key in SECRET_KEYS:
            env[option.env_var] = value.strip()
        else:
            public.append(pair)
    return public, env
