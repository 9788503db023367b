"""A fingerprint of an operator's user code, so that ``weir update`` can tell which
operators of a new program version changed.

Pickled bytes cannot say it: cloudpickle gives a class defined in the job file a fresh
identity on every run. The fingerprint hashes what the code *is*: the bytecode, constants
and names of its functions and methods, their defaults and closures, and the simple
values (numbers, strings, ...) and functions they reach through globals. Library code
(weir's own classes) counts by name only.

Example:
    >>> def v1(n):
    ...     return ("v1", n)
    >>> def v2(n):
    ...     return ("v2", n)
    >>> fingerprint([v1]) == fingerprint([v1]), fingerprint([v1]) == fingerprint([v2])
    (True, False)
    >>> class Tag:
    ...     def __call__(self, n):
    ...         return ("v1", n)
    >>> class Tag2:
    ...     def __call__(self, n):
    ...         return ("v2", n)
    >>> fingerprint([Tag()]) == fingerprint([Tag2()])
    False
"""

from __future__ import annotations

import hashlib
import types
from typing import Any, Protocol

_SIMPLE = (int, float, complex, str, bytes, bool, type(None))
#: Class attributes that describe the class rather than being its code.
_CLASS_METADATA = frozenset({"__dict__", "__weakref__", "__module__", "__doc__",
                             "__qualname__", "__annotations__", "__firstlineno__",
                             "__static_attributes__", "__orig_bases__", "__parameters__"})


class _Digest(Protocol):
    """What the code is fed to (a hashlib hash)."""

    def update(self, data: bytes, /) -> None: ...


def fingerprint(objects: list[Any]) -> str:
    """A short hex digest of the code of ``objects`` (operators or functions)."""
    digest = hashlib.sha256()
    seen: set[int] = set()
    for obj in objects:
        _feed(digest, obj, seen)
    return digest.hexdigest()[:16]


def _feed(digest: _Digest, obj: Any, seen: set[int]) -> None:
    if isinstance(obj, _SIMPLE):
        digest.update(repr(obj).encode())
        return
    if id(obj) in seen:
        digest.update(b"<seen>")
        return
    seen.add(id(obj))
    if isinstance(obj, tuple | list | frozenset | set):
        digest.update(type(obj).__name__.encode())
        for item in sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj:
            _feed(digest, item, seen)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=repr):
            _feed(digest, key, seen)
            _feed(digest, obj[key], seen)
    elif isinstance(obj, types.ModuleType):
        digest.update(f"module {obj.__name__}".encode())
    elif _library(obj):
        digest.update(f"library {getattr(obj, '__qualname__', type(obj).__qualname__)}"
                      .encode())
    elif isinstance(obj, types.FunctionType):
        _feed_function(digest, obj, seen)
    elif isinstance(obj, types.MethodType):
        _feed(digest, obj.__func__, seen)
        _feed(digest, obj.__self__, seen)
    elif isinstance(obj, type):
        digest.update(f"class {obj.__qualname__}".encode())
        for base in obj.__bases__:
            _feed(digest, base, seen)
        for name in sorted(vars(obj)):
            if name not in _CLASS_METADATA:  # dunder methods (__call__, ...) are code
                digest.update(name.encode())
                _feed(digest, vars(obj)[name], seen)
    elif isinstance(obj, staticmethod | classmethod):
        _feed(digest, obj.__func__, seen)
    elif isinstance(obj, types.CodeType):
        _feed_code(digest, obj, seen)
    else:  # an instance: its class and its attributes
        _feed(digest, type(obj), seen)
        attributes = getattr(obj, "__dict__", None)
        if attributes is not None:
            _feed(digest, {k: v for k, v in attributes.items() if not k.startswith("_")},
                  seen)


def _library(obj: Any) -> bool:
    if not isinstance(obj, type | types.FunctionType):
        return False
    module = getattr(obj, "__module__", None)  # None for a function made without one
    return isinstance(module, str) and (module == "builtins"
                                        or module.split(".")[0] in ("weir",))


def _feed_function(digest: _Digest, fn: types.FunctionType, seen: set[int]) -> None:
    _feed_code(digest, fn.__code__, seen)
    _feed(digest, fn.__defaults__, seen)
    for cell in fn.__closure__ or ():
        try:
            _feed(digest, cell.cell_contents, seen)
        except ValueError:  # an empty cell
            digest.update(b"<empty>")
    for name in _global_names(fn.__code__):
        if name in fn.__globals__:
            digest.update(name.encode())
            _feed(digest, fn.__globals__[name], seen)


def _feed_code(digest: _Digest, code: types.CodeType, seen: set[int]) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(digest, const, seen)
        else:
            _feed(digest, const, seen)


def _global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return sorted(set(names))
