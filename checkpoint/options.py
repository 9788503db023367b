"""Checkpoint storage options (Flink's key names where the concept is the same)."""

from __future__ import annotations

from weir.core.config import Option

CHECKPOINTS_DIR = Option(
    "state.checkpoints.dir", str, default=None,
    doc="Where checkpoints are written: a file:// path or s3://bucket/prefix.")
SAVEPOINTS_DIR = Option(
    "state.savepoints.dir", str, default=None,
    doc="Default target directory of savepoints (file:// or s3://).")
S3_ENDPOINT = Option(
    "s3.endpoint", str, default=None,
    doc="Endpoint URL of the S3-compatible service (e.g. http://127.0.0.1:8333); "
        "unset means AWS.")
S3_ACCESS_KEY = Option("s3.access-key", str, default=None, doc="S3 access key id.")
S3_SECRET_KEY = Option("s3.secret-key", str, default=None, doc="S3 secret access key.")
S3_REGION = Option("s3.region", str, default="us-east-1", doc="S3 region.")
S3_PATH_STYLE = Option(
    "s3.path.style.access", bool, default=True,
    doc="Address buckets as endpoint/bucket (path style), as S3-compatible servers expect.")
