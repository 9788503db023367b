"""PyFlink's slot sharing groups (``pyflink.datastream.slot_sharing_group``), accepted so
that programs using them run; in weir they have no effect. weir deploys subtask *i* of
every operator of a job into the job's slot *i* (one slot sharing group per job, Flink's
default), and a slot's resources are its TaskExecutor's: ``ds.slot_sharing_group(...)``
and ``env.register_slot_sharing_group(...)`` warn that they change nothing.

Example:
    >>> group = (SlotSharingGroup.builder("heavy").set_cpu_cores(2.0)
    ...          .set_task_heap_memory_mb(512).build())
    >>> group.get_name(), group.get_cpu_cores(), group.get_task_heap_memory().get_mebi_bytes()
    ('heavy', 2.0, 512)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["MemorySize", "SlotSharingGroup"]

_KIBI = 1024


class MemorySize:
    """A number of bytes, viewable in binary units (PyFlink's ``MemorySize``).

    >>> MemorySize.of_mebi_bytes(3).get_kibi_bytes(), str(MemorySize(bytes_size=2048))
    (3072, '2048 bytes')
    """

    def __init__(self, j_memory_size: Any = None, bytes_size: int | None = None) -> None:
        if j_memory_size is not None:
            msg = "MemorySize takes bytes_size=...: weir has no Java objects to wrap"
            raise TypeError(msg)
        if bytes_size is None or bytes_size < 0:
            msg = f"MemorySize needs a number of bytes >= 0, got {bytes_size!r}"
            raise ValueError(msg)
        self._bytes = int(bytes_size)

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> MemorySize:
        return MemorySize(bytes_size=mebi_bytes * _KIBI ** 2)

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes // _KIBI

    def get_mebi_bytes(self) -> int:
        return self._bytes // _KIBI ** 2

    def get_gibi_bytes(self) -> int:
        return self._bytes // _KIBI ** 3

    def get_tebi_bytes(self) -> int:
        return self._bytes // _KIBI ** 4

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemorySize) and other._bytes == self._bytes

    def __lt__(self, other: MemorySize) -> bool:
        if not isinstance(other, MemorySize):
            msg = f"cannot compare a MemorySize with {type(other).__name__}"
            raise TypeError(msg)
        return self._bytes < other._bytes

    def __le__(self, other: MemorySize) -> bool:
        return self == other or self < other

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __str__(self) -> str:
        return f"{self._bytes} bytes"

    __repr__ = __str__


@dataclass(frozen=True)
class SlotSharingGroup:
    """A slot sharing group's name and resources (PyFlink's); without effect in weir."""

    name: str
    cpu_cores: float | None = None
    task_heap_memory: MemorySize | None = None
    task_off_heap_memory: MemorySize | None = None
    managed_memory: MemorySize | None = None
    external_resources: dict[str, float] = field(default_factory=dict)

    def get_name(self) -> str:
        return self.name

    def get_cpu_cores(self) -> float | None:
        return self.cpu_cores

    def get_task_heap_memory(self) -> MemorySize | None:
        return self.task_heap_memory

    def get_task_off_heap_memory(self) -> MemorySize | None:
        return self.task_off_heap_memory

    def get_managed_memory(self) -> MemorySize | None:
        return self.managed_memory

    def get_external_resources(self) -> dict[str, float]:
        return dict(self.external_resources)

    def __hash__(self) -> int:
        return hash((self.name, self.cpu_cores))

    @staticmethod
    def builder(name: str) -> SlotSharingGroup.Builder:
        return SlotSharingGroup.Builder(SlotSharingGroup(name))

    class Builder:
        """Sets a group's resources, then ``build()``."""

        def __init__(self, group: SlotSharingGroup) -> None:
            self._group = group

        def _with(self, **changes: Any) -> SlotSharingGroup.Builder:
            self._group = replace(self._group, **changes)
            return self

        def set_cpu_cores(self, cpu_cores: float) -> SlotSharingGroup.Builder:
            return self._with(cpu_cores=float(cpu_cores))

        def set_task_heap_memory(self, task_heap_memory: MemorySize) -> SlotSharingGroup.Builder:
            return self._with(task_heap_memory=task_heap_memory)

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int) -> SlotSharingGroup.Builder:
            return self._with(task_heap_memory=MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(self, task_off_heap_memory: MemorySize
                                     ) -> SlotSharingGroup.Builder:
            return self._with(task_off_heap_memory=task_off_heap_memory)

        def set_task_off_heap_memory_mb(self, task_off_heap_memory_mb: int
                                        ) -> SlotSharingGroup.Builder:
            return self._with(
                task_off_heap_memory=MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize) -> SlotSharingGroup.Builder:
            return self._with(managed_memory=managed_memory)

        def set_managed_memory_mb(self, managed_memory_mb: int) -> SlotSharingGroup.Builder:
            return self._with(managed_memory=MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float) -> SlotSharingGroup.Builder:
            resources = {**self._group.external_resources, name: float(value)}
            return self._with(external_resources=resources)

        def build(self) -> SlotSharingGroup:
            return self._group


def warn_no_effect(what: str) -> None:
    """Say, once per call site, that a slot sharing setting changes nothing in weir."""
    warnings.warn(f"{what} has no effect: weir deploys subtask i of every operator of a job "
                  f"into the job's slot i (one slot sharing group)", UserWarning, stacklevel=3)
