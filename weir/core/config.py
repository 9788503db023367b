"""Typed configuration: options are declared once, parsed and validated at start-up.

Every option is an :class:`Option` declared in one of the subsystem options modules listed
in :data:`OPTION_MODULES`. A :class:`Configuration` is built from a YAML file (``--conf``),
``-D key=value`` overrides and ``WEIR_*`` environment variables, and is validated eagerly:
an unknown key or a bad value raises :class:`ConfigError` naming the key and what it accepts.

Example:
    >>> from weir.core.config import Configuration
    >>> from weir.core.options import PARALLELISM
    >>> conf = Configuration.from_pairs({"parallelism.default": "4"})
    >>> conf.get(PARALLELISM)
    4
"""

from __future__ import annotations

import builtins
import importlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

import yaml

from weir.core.errors import ConfigError

T = TypeVar("T")
V = TypeVar("V")

#: Modules that declare options; the registry and the README table are built from them.
OPTION_MODULES = (
    "weir.core.options",
    "weir.jobmaster.options",
    "weir.taskexecutor.options",
    "weir.shuffle.options",
    "weir.state.options",
    "weir.checkpoint.options",
)


class Seconds(float):
    """An option's duration, in seconds, parsed from Flink-style strings such as ``100 ms``
    or ``10s`` (the type of a Flink ``Duration`` option).

    Not PyFlink's :class:`~weir.core.time.Duration`, which a program builds in milliseconds
    (``Duration.of_seconds(5)``): this is the float the runtime reads from a configuration,
    ``time.sleep(conf.get(HEARTBEAT_INTERVAL))``.

    >>> Seconds.parse("100 ms"), Seconds.parse("1 min")
    (0.1, 60.0)
    """

    _UNITS = {
        "ms": 0.001, "milli": 0.001, "millis": 0.001, "milliseconds": 0.001,
        "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
        "min": 60.0, "m": 60.0, "minute": 60.0, "minutes": 60.0,
        "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
        "d": 86400.0, "day": 86400.0, "days": 86400.0,
    }

    @classmethod
    def parse(cls, text: str | float | int) -> Seconds:
        if isinstance(text, int | float):
            # Bare numbers are milliseconds, as in Flink.
            return cls(float(text) / 1000.0)
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if not m:
            msg = f"not a duration: {text!r} (examples: '100 ms', '10 s', '1 min')"
            raise ValueError(msg)
        number, unit = float(m.group(1)), m.group(2).lower() or "ms"
        if unit not in cls._UNITS:
            msg = f"unknown duration unit {unit!r} in {text!r} (use ms, s, min, h or d)"
            raise ValueError(msg)
        return cls(number * cls._UNITS[unit])


class ByteSize(int):
    """An option's number of bytes, parsed from Flink-style strings such as ``32kb`` or
    ``64 mb`` (the type of a Flink ``MemorySize`` option).

    Not PyFlink's :class:`~weir.datastream.slot_sharing_group.MemorySize`, a value object of
    the API (built with ``bytes_size=``, equal only to another MemorySize, printed as
    ``2048 bytes``): this is the int the runtime computes with.

    >>> ByteSize.parse("32kb") + 0
    32768
    """

    _UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2,
              "g": 1024**3, "gb": 1024**3, "t": 1024**4, "tb": 1024**4}

    @classmethod
    def parse(cls, text: str | int) -> ByteSize:
        if isinstance(text, int):
            return cls(text)
        m = re.fullmatch(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in cls._UNITS:
            msg = f"not a memory size: {text!r} (examples: '32kb', '64 mb', '1gb')"
            raise ValueError(msg)
        return cls(int(m.group(1)) * cls._UNITS[m.group(2).lower()])


def _parse_bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    msg = f"not a boolean: {text!r} (use true or false)"
    raise ValueError(msg)


_PARSERS: dict[type, Callable[[Any], Any]] = {
    int: lambda v: int(str(v).strip()),
    float: lambda v: float(str(v).strip()),
    str: str,
    bool: _parse_bool,
    Seconds: Seconds.parse,
    ByteSize: ByteSize.parse,
}


@dataclass(frozen=True, init=False)
class Option(Generic[T]):
    """One configuration option: its key, type, default and documentation.

    ``T`` is what :meth:`Configuration.get` returns for it: the declared type (``int``,
    ``float``, ``str``, ``bool``, :class:`Duration`, :class:`MemorySize`), or that type or
    None when the option has no default. A default may be written as a value of the type or
    as the text a configuration file would hold (``"100 ms"``, ``"32kb"``).

    Example:
        >>> INTERVAL = Option("heartbeat.interval", Seconds, default="1 s",
        ...                   doc="Time between heartbeats.")
        >>> INTERVAL.parse("500 ms")
        0.5
    """

    key: str
    type: type
    default: object
    doc: str
    choices: tuple[str, ...] = ()
    deprecated_keys: tuple[str, ...] = ()
    validator: Callable[[Any], str | None] | None = field(default=None, compare=False)
    #: Older names of choices (Flink's ``filesystem`` state backend is ``hashmap``).
    value_aliases: tuple[tuple[str, str], ...] = ()

    @overload
    def __init__(self: Option[V], key: str, type: builtins.type[V], default: V | str, doc: str,
                 choices: tuple[str, ...] = (), deprecated_keys: tuple[str, ...] = (),
                 validator: Callable[[V], str | None] | None = None,
                 value_aliases: tuple[tuple[str, str], ...] = ()) -> None: ...

    @overload
    def __init__(self: Option[V | None], key: str, type: builtins.type[V], default: None, doc: str,
                 choices: tuple[str, ...] = (), deprecated_keys: tuple[str, ...] = (),
                 validator: Callable[[V], str | None] | None = None,
                 value_aliases: tuple[tuple[str, str], ...] = ()) -> None: ...

    def __init__(self, key: str, type: builtins.type, default: object, doc: str,
                 choices: tuple[str, ...] = (), deprecated_keys: tuple[str, ...] = (),
                 validator: Callable[[Any], str | None] | None = None,
                 value_aliases: tuple[tuple[str, str], ...] = ()) -> None:
        # Written out (not generated by @dataclass) so that the overloads above can tell
        # the type checker what T is; frozen, hence object.__setattr__.
        for name, value in (("key", key), ("type", type), ("default", default), ("doc", doc),
                            ("choices", choices), ("deprecated_keys", deprecated_keys),
                            ("validator", validator), ("value_aliases", value_aliases)):
            object.__setattr__(self, name, value)

    @property
    def env_var(self) -> str:
        """The environment variable that supplies this option when no config sets it."""
        return "WEIR_" + re.sub(r"[^A-Za-z0-9]+", "_", self.key).upper()

    def parse(self, raw: object) -> T:
        """Parse ``raw`` into the option's type, raising ConfigError naming the key.

        None stays None (an option without a default is unset).
        """
        if raw is None:
            return cast("T", None)
        try:
            value = _PARSERS[self.type](raw)
        except (ValueError, TypeError) as err:
            msg = f"invalid value for '{self.key}': {err}"
            raise ConfigError(msg) from err
        if self.choices:
            value = dict(self.value_aliases).get(str(value).lower(), value)
            canonical = {c.lower(): c for c in self.choices}.get(str(value).lower())
            if canonical is None:
                msg = (f"invalid value for '{self.key}': {raw!r} "
                       f"(accepted: {', '.join(self.choices)})")
                raise ConfigError(msg)
            value = canonical  # matched case-insensitively: hand out the declared spelling
        if self.validator is not None:
            problem = self.validator(value)
            if problem:
                msg = f"invalid value for '{self.key}': {raw!r} ({problem})"
                raise ConfigError(msg)
        # _PARSERS[self.type] makes a self.type, which the constructor ties to T.
        return cast("T", value)

    def default_value(self) -> T:
        """The default, parsed; None for an option without one."""
        return self.parse(self.default)


def positive(value: float) -> str | None:
    """Validator: the value must be greater than zero."""
    return None if value > 0 else "must be greater than 0"


def non_negative(value: float) -> str | None:
    """Validator: the value must be zero or more."""
    return None if value >= 0 else "must be 0 or more"


_REGISTRY: dict[str, Option[Any]] = {}


def all_options() -> dict[str, Option[Any]]:
    """Every declared option by key (deprecated keys included), importing the option modules."""
    if not _REGISTRY:
        for module_name in OPTION_MODULES:
            module = importlib.import_module(module_name)
            for value in vars(module).values():
                if isinstance(value, Option):
                    _REGISTRY[value.key] = value
                    for old in value.deprecated_keys:
                        _REGISTRY[old] = value
    return _REGISTRY


class Configuration:
    """Validated configuration values keyed by option key.

    Values are parsed when set, so a ``Configuration`` never holds an invalid value.
    ``get`` falls back to the ``WEIR_*`` environment variable, then to the default. A key
    that is no weir option is an error wherever weir reads configuration (files, ``-D``,
    ``env.configure``...), naming the closest option.

    PyFlink's key/value methods work too (``set_string``/``get_string``, ``set_integer``,
    ``set_boolean``, ``set_float``, ``set_bytearray`` and their getters, ``key_set``,
    ``contains_key``, ``remove_config``, ``add_all``, ``add_all_to_dict``, ``to_dict``).
    They see the values stored in this object only, as PyFlink's do: a getter returns its
    ``default_value`` for a key not set here. As in PyFlink, they also store keys that are
    no weir option (``python.fn-execution.bundle.size``, an application's own settings):
    such a key is kept as given and read back, and an environment configured with it
    warns that weir ignores it. A weir option's value is validated either way.

    Example:
        >>> conf = Configuration().set_integer("parallelism.default", 4)
        >>> conf.get_integer("parallelism.default", 1), conf.get_string("state.backend.type", "?")
        (4, '?')
        >>> sorted(Configuration(conf).set_boolean("execution.checkpointing.unaligned.enabled",
        ...                                        True).to_dict().items())
        [('execution.checkpointing.unaligned.enabled', 'true'), ('parallelism.default', '4')]
        >>> Configuration().set_string("my.app.region", "eu").get_string("my.app.region", "")
        'eu'
    """

    def __init__(self, other: Configuration | None = None) -> None:
        """An empty configuration, or a copy of ``other`` (as PyFlink's)."""
        self._values: dict[str, Any] = {} if other is None else dict(other._values)
        self._raw: dict[str, str] = {} if other is None else dict(other._raw)
        #: Keys of no weir option set through PyFlink's methods, with the values given.
        self._other: dict[str, Any] = {} if other is None else dict(other._other)

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Configuration:
        conf = cls()
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        for key, value in items:
            conf.set_raw(key, value)
        return conf

    @classmethod
    def load(cls, conf_file: str | os.PathLike[str] | None = None,
             dynamic: Iterable[str] = ()) -> Configuration:
        """Read ``conf_file`` (YAML, flat or nested keys) then apply ``-D key=value`` pairs."""
        conf = cls()
        if conf_file is not None:
            path = Path(conf_file)
            if not path.is_file():
                msg = f"config file not found: {path} (pass an existing YAML file to --conf)"
                raise ConfigError(msg)
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError as err:
                msg = f"config file {path} is not valid YAML: {err}".replace("\n", " ")
                raise ConfigError(msg) from err
            if not isinstance(data, dict):
                msg = f"config file {path} must hold a mapping of option keys to values"
                raise ConfigError(msg)
            for key, value in _flatten(data):
                conf.set_raw(key, value)
        for pair in dynamic:
            key, sep, value = pair.partition("=")
            if not sep:
                msg = f"-D expects key=value, got {pair!r}"
                raise ConfigError(msg)
            conf.set_raw(key.strip(), value.strip())
        return conf

    def set_raw(self, key: str, value: Any) -> None:
        """Set an option by key from a raw (string or YAML) value, validating it."""
        option = all_options().get(key)
        if option is None:
            msg = f"unknown configuration key '{key}'{_suggestion(key)}"
            raise ConfigError(msg)
        self.set(option, value)

    def set(self, option: Option[T], value: T | str | None) -> Configuration:
        """Set ``option`` to ``value`` (a value of its type or text to parse; None unsets it)."""
        if value is None:
            # An empty value (``key:`` in YAML) unsets the option: storing None would hide
            # the env var and the default, and ship the string "None" to other processes.
            self._values.pop(option.key, None)
            self._raw.pop(option.key, None)
            return self
        self._values[option.key] = option.parse(value)
        self._raw[option.key] = str(value)
        return self

    def get(self, option: Option[T]) -> T:
        if option.key in self._values:
            # Stored by set(), parsed by this very option.
            return cast("T", self._values[option.key])
        env = os.environ.get(option.env_var)
        if env is not None:
            return option.parse(env)
        return option.default_value()

    def contains(self, option: Option[Any]) -> bool:
        return option.key in self._values or option.env_var in os.environ

    def options_dict(self) -> dict[str, str]:
        """The weir options set here, as strings (what is shipped to other processes)."""
        return dict(self._raw)

    def other_keys(self) -> dict[str, Any]:
        """The keys of no weir option set here through PyFlink's methods."""
        return dict(self._other)

    # -- PyFlink's key/value API ---------------------------------------------------------------

    def _put(self, key: str, value: Any, text: str) -> Configuration:
        if key in all_options():
            self.set_raw(key, text)
        else:
            self._other[key] = value
        return self

    def _stored(self, key: str) -> Any:
        """The value stored under ``key`` (a weir option's raw text, or the value given for
        another key), None when not set here."""
        option = all_options().get(key)
        if option is None:
            return self._other.get(key)
        return self._raw.get(option.key)

    def set_string(self, key: str, value: str) -> Configuration:
        """Set ``key`` (a weir option's value is validated, as ``set_raw``)."""
        return self._put(key, str(value), str(value))

    def get_string(self, key: str, default_value: str) -> str:
        """The value set for ``key``, as a string; ``default_value`` when not set here."""
        stored = self._stored(key)
        return default_value if stored is None else _text(stored)

    def set_integer(self, key: str, value: int) -> Configuration:
        return self._put(key, int(value), str(int(value)))

    def get_integer(self, key: str, default_value: int) -> int:
        """The value set for ``key`` as an int; ``default_value`` when not set here."""
        stored = self._stored(key)
        return default_value if stored is None else _parse_number(key, _text(stored), int)

    def set_float(self, key: str, value: float) -> Configuration:
        return self._put(key, float(value), str(float(value)))

    def get_float(self, key: str, default_value: float) -> float:
        """The value set for ``key`` as a float; ``default_value`` when not set here."""
        stored = self._stored(key)
        if stored is None:
            return float(default_value)
        return _parse_number(key, _text(stored), float)

    def set_boolean(self, key: str, value: bool) -> Configuration:
        return self._put(key, bool(value), "true" if value else "false")

    def get_boolean(self, key: str, default_value: bool) -> bool:
        """The value set for ``key`` as a bool; ``default_value`` when not set here."""
        stored = self._stored(key)
        if stored is None:
            return default_value
        try:
            return _parse_bool(_text(stored))
        except ValueError as err:
            msg = f"invalid value for '{key}': {err}"
            raise ConfigError(msg) from err

    def set_bytearray(self, key: str, value: bytes | bytearray) -> Configuration:
        """Store bytes under ``key`` (no weir option takes bytes)."""
        if key in all_options():
            msg = f"'{key}' is a weir option and takes text, not bytes: use set_string"
            raise ConfigError(msg)
        self._other[key] = bytes(value)
        return self

    def get_bytearray(self, key: str, default_value: bytes | bytearray) -> bytearray:
        stored = self._other.get(key)
        if stored is None:
            return bytearray(default_value)
        if not isinstance(stored, bytes):
            msg = f"'{key}' holds {type(stored).__name__}, not bytes"
            raise ConfigError(msg)
        return bytearray(stored)

    def key_set(self) -> builtins.set[str]:
        """The keys set in this configuration."""
        return set(self._raw) | set(self._other)

    def contains_key(self, key: str) -> bool:
        """Whether ``key`` is set in this configuration (the ``WEIR_*`` variables aside)."""
        return self._stored(key) is not None

    def remove_config(self, key: str) -> bool:
        """Unset ``key``; whether it was set."""
        if self._other.pop(key, None) is not None:
            return True
        option = all_options().get(key)
        if option is None or option.key not in self._raw:
            return False
        del self._raw[option.key]
        self._values.pop(option.key, None)
        return True

    def add_all(self, other: Configuration, prefix: str | None = None) -> Configuration:
        """Set every value of ``other`` here, its keys preceded by ``prefix`` if given."""
        for key, value in other._raw.items():
            self._put(f"{prefix or ''}{key}", value, value)
        for key, value in other._other.items():
            new = f"{prefix or ''}{key}"
            self._put(new, value, _text(value)) if not isinstance(value, bytes) \
                else self.set_bytearray(new, value)
        return self

    def add_all_to_dict(self, target_dict: dict[str, Any]) -> None:
        """Add the values set here to ``target_dict``: a weir option's as its text, another
        key's as it was given (an int stays an int, as PyFlink's Properties hold)."""
        target_dict.update(self._raw)
        target_dict.update(self._other)

    def to_dict(self) -> dict[str, str]:
        """Every key set here with its value as a string, as PyFlink's ``to_dict``."""
        return {**self._raw, **{key: _text(value) for key, value in self._other.items()}}

    def merged(self, other: Mapping[str, str]) -> Configuration:
        """A copy with ``other`` applied on top (weir options only)."""
        conf = Configuration.from_pairs(self._raw)
        for key, value in other.items():
            conf.set_raw(key, value)
        return conf

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        return self._raw == other._raw and self._other == other._other

    def __hash__(self) -> int:
        return hash(frozenset(self.to_dict().items()))

    def __deepcopy__(self, memo: dict[int, Any]) -> Configuration:
        return Configuration(self)

    def __str__(self) -> str:
        """As Flink prints a configuration: ``{key=value, ...}``."""
        return "{" + ", ".join(f"{k}={v}" for k, v in self.to_dict().items()) + "}"

    def __repr__(self) -> str:
        return f"Configuration({self.to_dict()!r})"


def _text(value: Any) -> str:
    """A stored value as PyFlink's string getters give it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_number(key: str, text: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(text.strip())
    except ValueError as err:
        msg = f"invalid value for '{key}': {text!r} is not a {getattr(kind, '__name__', kind)}"
        raise ConfigError(msg) from err


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in all_options():
            yield from _flatten(value, full + ".")
        else:
            yield full, value


def _suggestion(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(all_options()), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else " (see the configuration reference)"


def options_reference_markdown() -> str:
    """The configuration reference table, as Markdown, for the README."""
    rows = ["| key | default | type | description |", "|---|---|---|---|"]
    seen: set[str] = set()
    for module_name in OPTION_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, Option) and value.key not in seen:
                seen.add(value.key)
                default = "(none)" if value.default is None else f"`{value.default}`"
                kind = value.type.__name__
                doc = value.doc
                if value.choices:
                    doc += f" One of: {', '.join(value.choices)}."
                rows.append(f"| `{value.key}` | {default} | {kind} | {doc} "
                             f"Env: `{value.env_var}`. |")
    return "\n".join(rows)
