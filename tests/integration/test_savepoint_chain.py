"""Native savepoints of one running job into one directory: the second and third store only
the files the first does not hold and refer to the rest; the directory, moved (or copied
to another S3 prefix), restores each of them without the job's checkpoint directory, also
after the first was disposed of.

The job is the exactly-once job (tests/support/exactly_once.py). A run restored from a
savepoint writes into a fresh output directory (the sink's state, which names the old one,
is dropped), so its committed ``count`` records must be,
per key, exactly the running counts after the savepoint's up to the key's total: the
restored RocksDB state continues where that savepoint left it, nothing lost or repeated.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, job_details, poll
from tests.support.exactly_once import (
    committed_output,
    running_counts,
    status_name,
    submit,
    wait_ended,
)
from weir.checkpoint.metadata import read_metadata
from weir.checkpoint.savepoint_chain import REFS_NAME, SavepointRefs
from weir.checkpoint.storage import create_storage

N, KEYS = 6000, 13
HELD = {"pause_every": 100, "held_slowdown": 50.0}


def _config(checkpoints: str, **extra: str) -> dict[str, str]:
    return {"execution.checkpointing.interval": "300 ms", "state.checkpoints.dir": checkpoints,
            "state.backend.type": "rocksdb", "pipeline.batch-size": "50", **extra}


def _last_line(result: Any) -> str:
    assert result.returncode == 0, result.stderr + result.stdout
    return str(result.stdout.strip().splitlines()[-1])


def _keyed_handles(directory: str, config: Any = None) -> dict[tuple[int, int, str], Any]:
    """(vertex, subtask, operator) -> the RocksDB handle's JSON form, URIs resolved."""
    metadata = read_metadata(create_storage(directory, config), directory)
    found = {}
    for sub in metadata.subtasks:
        for op in sub.state.operators:
            for handle in json.loads(op.keyed_state or "[]"):
                if handle.get("kind") == "rocksdb-incremental":
                    found[(sub.vertex_id, sub.subtask_index, op.operator_uid)] = handle
    assert found, f"no RocksDB state in {directory}"
    return found


def _take_chain(cluster: LocalCluster, job_id: str, target: str) -> list[str]:
    """Three native savepoints into ``target``, each after more records changed state."""
    paths = []
    for _ in range(3):
        seen = job_details(cluster, job_id).last_checkpoint_id
        poll(lambda seen=seen: job_details(cluster, job_id).last_checkpoint_id > seen + 2,
             60, interval=0.1, what="newer checkpoints")
        paths.append(_last_line(cluster.weir("savepoint", job_id, target,
                                             "--type", "native")))
    return paths


def _check_only_new_files_stored(paths: list[str], config: Any = None) -> None:
    """The second and third savepoints store only files the one before did not hold and
    refer to the others there."""
    handles = [_keyed_handles(p, config) for p in paths]
    for index in (1, 2):
        before, now, own = handles[index - 1], handles[index], paths[index] + "/"
        referred = stored_all = state_all = 0
        for key, handle in now.items():
            previous = before[key]["shared"]
            mine = 0
            for name, file in handle["shared"].items():
                if name in previous:
                    assert file["uri"] == previous[name]["uri"], (key, name)
                    mine += 1
                else:
                    assert file["uri"].startswith(own), (key, name)
            stored = sum(f["length"] for f in [*handle["shared"].values(),
                                               *handle["private"].values()]
                         if f["uri"].startswith(own))
            # Uploaded, or copied from the last checkpoint: either way new since then.
            assert stored >= handle["uploaded_bytes"], key
            stored_all += stored
            state_all += sum(f["length"] for f in [*handle["shared"].values(),
                                                   *handle["private"].values()])
            if mine:
                assert handle["savepoint_base"] == paths[index - 1].rsplit("/", 1)[1]
            referred += mine
        assert referred > 0, f"savepoint {index + 1} referred to nothing"
        assert stored_all < state_all, (stored_all, state_all)
        refs = create_storage(paths[index], config)
        data = refs.read(refs_handle(paths[index]))
        parsed = SavepointRefs.decode(data, paths[index])
        assert parsed.bases == (paths[index - 1].rsplit("/", 1)[1],)


def refs_handle(directory: str) -> Any:
    from weir.checkpoint.storage import self_verifying

    return self_verifying(f"{directory}/{REFS_NAME}")


def _restore_and_check(cluster: LocalCluster, tmp_path: Path, savepoint: str, tag: str,
                       config: dict[str, str], gate: Path) -> int:
    """Run the job from ``savepoint`` into a fresh output directory; check its counts
    continue each key's from the savepoint to the end. Returns how many records the
    savepoint had counted."""
    out = tmp_path / f"out-{tag}"
    job_id = submit(cluster, tmp_path, out, N, config=config, gate=gate,
                    run_args=("-s", savepoint, "--allow-non-restored-state"), **HELD)
    final = wait_ended(cluster, job_id)
    assert status_name(final) == "FINISHED", final.failure.message
    counts = Counter({(k, c): n for (kind, k, c), n in committed_output(out).items()
                      if kind == "count"})
    assert max(counts.values(), default=1) == 1, "a count was committed twice"
    totals = Counter(i % KEYS for i in range(N))
    counted = 0
    for key, total in totals.items():
        mine = sorted(c for (k, c) in counts if k == key)
        start = mine[0] - 1 if mine else total
        assert mine == list(range(start + 1, total + 1)), \
            f"key {key}: counts {mine[:3]}...{mine[-3:]} after restoring {savepoint}"
        counted += start
    assert set(counts) <= set(running_counts(N, KEYS))
    return counted


def test_a_chain_of_native_savepoints_moves_whole_and_survives_disposal(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(2, 2)
    gate = tmp_path / "gate"
    checkpoints = tmp_path / "checkpoints"
    job_id = submit(cluster, tmp_path, tmp_path / "out", N,
                    config=_config(checkpoints.as_uri()), gate=gate, **HELD)
    target = tmp_path / "savepoints"
    paths = _take_chain(cluster, job_id, target.as_uri())
    assert len({p.rsplit("/", 1)[0] for p in paths}) == 1
    _check_only_new_files_stored(paths)
    assert _last_line(cluster.weir("cancel", job_id))
    wait_ended(cluster, job_id)
    # The restores read neither the checkpoint directory nor the savepoints' old place.
    shutil.rmtree(checkpoints)
    moved = tmp_path / "elsewhere" / "savepoints"
    moved.parent.mkdir()
    shutil.move(target, moved)
    moved_paths = [str(moved / p.rsplit("/", 1)[1]) for p in paths]
    gate.touch()
    config = _config((tmp_path / "checkpoints-2").as_uri())
    counted = [_restore_and_check(cluster, tmp_path, moved_paths[0], "1", config, gate),
               _restore_and_check(cluster, tmp_path, moved_paths[1], "2", config, gate)]
    assert _last_line(cluster.weir("savepoint", "--dispose", moved_paths[0])) \
        .startswith("disposed")
    first = Path(moved_paths[0])
    assert not (first / "_metadata").exists()
    assert [f for f in first.rglob("*") if f.is_file()], "files the others need were deleted"
    counted.append(_restore_and_check(cluster, tmp_path, moved_paths[2], "3", config, gate))
    assert counted[0] < counted[1] < counted[2], counted


@pytest.mark.slow
def test_a_chain_on_s3_copied_to_another_prefix_restores(
        cluster_factory: Any, tmp_path: Path, seaweed_s3: Any, s3_bucket: str) -> None:
    s3 = dict(seaweed_s3.config(s3_bucket, "checkpoints").to_dict().items())
    cluster = cluster_factory(2, 2, *(f"{k}={v}" for k, v in s3.items()))
    gate = tmp_path / "gate"
    config = {**_config(f"s3://{s3_bucket}/checkpoints"), **s3}
    job_id = submit(cluster, tmp_path, tmp_path / "out", N, config=config, gate=gate, **HELD)
    paths = _take_chain(cluster, job_id, f"s3://{s3_bucket}/savepoints")
    from weir.core.config import Configuration

    client_config = Configuration.from_pairs(s3)
    _check_only_new_files_stored(paths, client_config)
    assert _last_line(cluster.weir("cancel", job_id))
    wait_ended(cluster, job_id)
    client = seaweed_s3.client()
    for prefix in ("checkpoints/",):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3_bucket,
                                                                     Prefix=prefix):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=s3_bucket, Key=obj["Key"])
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_bucket, Prefix="savepoints/") for o in page.get("Contents", [])]
    for key in keys:
        client.copy_object(Bucket=s3_bucket, Key="copied/" + key[len("savepoints/"):],
                           CopySource={"Bucket": s3_bucket, "Key": key})
        client.delete_object(Bucket=s3_bucket, Key=key)
    copied = [f"s3://{s3_bucket}/copied/{p.rsplit('/', 1)[1]}" for p in paths]
    gate.touch()
    restore_config = {**_config(f"s3://{s3_bucket}/checkpoints-2"), **s3}
    counted = [_restore_and_check(cluster, tmp_path, copied[0], "1", restore_config, gate),
               _restore_and_check(cluster, tmp_path, copied[2], "3", restore_config, gate)]
    assert counted[0] < counted[1], counted
