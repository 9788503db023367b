"""security.auth.token: every RPC must carry the cluster's token."""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import weir_cli, write_job


def test_submission_without_the_token_is_refused(cluster_factory, tmp_path: Path):
    cluster = cluster_factory(1, 1, "security.auth.token=s3cret")
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).map(lambda n: n * 2).print()
        env.execute("guarded")
    """)
    refused = cluster.weir("run", str(job))
    assert refused.returncode == 2
    assert "security.auth.token" in refused.stderr and "Traceback" not in refused.stderr
    wrong = cluster.weir("run", "-D", "security.auth.token=guess", str(job))
    assert wrong.returncode == 2 and "refused" in wrong.stderr
    accepted = cluster.weir("run", "-D", "security.auth.token=s3cret", str(job))
    assert accepted.returncode == 0, accepted.stderr
    listing = cluster.weir("list", "-D", "security.auth.token=s3cret")
    assert "guarded" in listing.stdout and "FINISHED" in listing.stdout
    # The TaskExecutors authenticated too (they registered and ran the job).
    status = weir_cli("cluster", "status", "--dir", str(cluster.dir), "--json",
                      "-D", "security.auth.token=s3cret")
    assert '"registered": true' in status.stdout
