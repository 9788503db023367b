"""Creates the keyed state backend an operator instance uses, from ``state.backend.type``.

Example:
    >>> from weir.core.config import Configuration
    >>> from weir.state.key_groups import KeyGroupRange
    >>> conf = Configuration.from_pairs({"state.backend.type": "hashmap"})
    >>> create_keyed_state_backend(conf, 128, KeyGroupRange(0, 63), "op").name
    'hashmap'
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from weir.core.config import Configuration
from weir.state import options
from weir.state.backend import KeyedStateBackend
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange


def create_keyed_state_backend(config: Configuration, max_parallelism: int,
                               key_group_range: KeyGroupRange,
                               operator: str) -> KeyedStateBackend:
    """A fresh backend for one operator instance; RocksDB instances live in their own
    directory under ``state.backend.rocksdb.localdir`` (default: the system temp dir).

    ``state.backend.incremental`` chooses RocksDB's checkpoint format and
    ``state.backend.restore.lazy`` how ``state.restore.restore`` loads canonical state."""
    backend = _create(config, max_parallelism, key_group_range, operator)
    backend.lazy_restore = bool(config.get(options.LAZY_RESTORE))
    backend.rescale_method = str(config.get(options.RESCALE_METHOD))
    return backend


def _create(config: Configuration, max_parallelism: int, key_group_range: KeyGroupRange,
            operator: str) -> KeyedStateBackend:
    if config.get(options.BACKEND_TYPE) == "hashmap":
        return HeapKeyedStateBackend(max_parallelism, key_group_range)
    from weir.state.rocksdb import RocksDBKeyedStateBackend  # loads the native library only if used

    base = config.get(options.ROCKSDB_LOCALDIR)
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", operator)[:80]
    directory = tempfile.mkdtemp(prefix=f"weir-rocksdb-{safe}-", dir=base or None)
    return RocksDBKeyedStateBackend(max_parallelism, key_group_range, directory,
                               int(config.get(options.ROCKSDB_MEMORY)),
                               incremental=bool(config.get(options.INCREMENTAL)))
