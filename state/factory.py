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
import threading
from pathlib import Path

from weir.core.config import Configuration
from weir.state import options
from weir.state.backend import KeyedStateBackend
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange


def create_keyed_state_backend(config: Configuration, max_parallelism: int,
                               key_group_range: KeyGroupRange,
                               operator: str, job_id: str | None = None,
                               local_root: Path | None = None,
                               cancelled: threading.Event | None = None) -> KeyedStateBackend:
    """A fresh backend for one operator instance; RocksDB instances live in their own
    directory under ``state.backend.rocksdb.localdir`` (default: the system temp dir).

    ``state.backend.incremental`` chooses RocksDB's checkpoint format and
    ``state.backend.restore.lazy`` how ``state.restore.restore`` loads canonical state.
    With ``state.changelog.enabled`` (and a checkpoint directory and ``job_id`` to put the
    log under), the backend is wrapped in the changelog backend (state/changelog.py);
    ``local_root`` (task-local recovery) keeps local copies of its log files and
    materializations; ``cancelled`` (the task's cancellation) ends a wait on the log."""
    backend = _create(config, max_parallelism, key_group_range, operator)
    backend.lazy_restore = bool(config.get(options.LAZY_RESTORE))
    backend.rescale_method = str(config.get(options.RESCALE_METHOD))
    if config.get(options.CHANGELOG_ENABLED) and job_id:
        return _with_changelog(backend, config, job_id, operator, local_root, cancelled)
    return backend


def _with_changelog(backend: KeyedStateBackend, config: Configuration, job_id: str,
                    operator: str, local_root: Path | None,
                    cancelled: threading.Event | None) -> KeyedStateBackend:
    from weir.checkpoint import options as checkpoint_options
    from weir.checkpoint.changelog_storage import ChangelogStorageOptions, storage_for
    from weir.checkpoint.storage import create_storage
    from weir.state.changelog import wrap

    directory = config.get(checkpoint_options.CHECKPOINTS_DIR)
    if not directory:
        return backend  # no checkpoints: a log would serve nothing
    checkpoints = create_storage(directory, config)
    base = config.get(options.CHANGELOG_BASE_PATH)
    if base:
        log_storage, prefix = create_storage(base, config), str(job_id)
    else:
        log_storage, prefix = checkpoints, f"{job_id}/changelog"
    dstl = storage_for(log_storage, prefix, ChangelogStorageOptions(
        int(config.get(options.CHANGELOG_PREEMPTIVE_PERSIST)),
        float(config.get(options.CHANGELOG_PERSIST_DELAY)),
        int(config.get(options.CHANGELOG_PERSIST_SIZE)),
        float(config.get(options.CHANGELOG_UPLOAD_TIMEOUT)),
        int(config.get(options.CHANGELOG_UPLOAD_ATTEMPTS)),
        float(config.get(options.CHANGELOG_UPLOAD_RETRY_DELAY)),
        int(config.get(options.CHANGELOG_MAX_IN_FLIGHT))),
        local_dir=local_root / job_id / "changelog" if local_root is not None else None)
    owner = re.sub(r"[^A-Za-z0-9_.-]+", "_", operator)[:80]
    writer = dstl.create_writer(owner)
    writer.cancelled = cancelled
    return wrap(backend, writer, checkpoints, job_id, owner,
                float(config.get(options.CHANGELOG_MATERIALIZE_INTERVAL)),
                int(config.get(options.CHANGELOG_MAX_FAILURES)), local_root)


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
