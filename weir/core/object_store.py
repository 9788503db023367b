"""Files a job reads or stages, wherever they are: the local file system or S3.

Checkpoints talk to S3 through boto3 (:mod:`weir.checkpoint.s3`: multipart uploads, error
translation). Sources read data files through :mod:`pyarrow.fs`, whose S3 file system does
ranged reads in C++ without holding the interpreter lock, and which Parquet, CSV and JSON
readers take directly. Both are configured by the same ``s3.*`` options, so one set of
credentials serves a job's checkpoints, its sources and its staged Spark data.

Example:
    >>> fs, path = filesystem("/data/events", Configuration())
    >>> type(fs).__name__, path
    ('LocalFileSystem', '/data/events')
    >>> filesystem("file:///data/events", Configuration())[1]
    '/data/events'
    >>> split_uri("s3://bucket/staging/run-1")
    ('s3', 'bucket/staging/run-1')
    >>> location("S3://bucket/staging/", "spark.staging.dir")
    's3://bucket/staging'
"""

from __future__ import annotations

import functools
import os
import re
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import ConfigError

#: URI schemes a job's data can live under (no scheme: a local path).
SCHEMES = ("file", "s3")


def scheme(uri: str) -> str:
    """The lower-case scheme of ``uri``; "" for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def split_uri(uri: str) -> tuple[str, str]:
    """(scheme, path as :mod:`pyarrow.fs` names it): ``bucket/key`` for S3, an absolute
    path for local files."""
    kind = scheme(uri)
    if kind == "s3":
        return "s3", uri[len("s3://"):].strip("/")
    if kind in ("", "file"):
        return "file", uri[len("file://"):] if kind else uri
    msg = (f"{uri!r} has an unsupported scheme {kind}://: use a local path, file:// or "
           "s3://bucket/prefix")
    raise ConfigError(msg)


#: Something that starts like a URI scheme ("s3:", "hdfs:") but is no ``scheme://`` URI.
_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def location(value: str, option: str) -> str:
    """``value`` checked as a place for job data, normalized: a local path (absolute),
    ``file:///path`` (its path) or ``s3://bucket/prefix`` (lower-case scheme, no trailing
    ``/``; a relative path is made absolute). ``option`` names the setting in the error.

    Raises ConfigError, in one line naming ``option`` and the fix, for an empty value,
    another scheme, something that looks like a scheme but is no URI (``s3:/x``,
    ``s3:bucket``: as a path it would be a folder named ``s3:``), a ``file://`` URI with a
    host or a relative path, and an ``s3://`` URI without a valid bucket.
    """
    fix = "use an absolute local path, file:///path or s3://bucket/prefix"
    text = value.strip()
    kind = scheme(text)
    if not text:
        msg = f"{option} is empty: {fix}"
        raise ConfigError(msg)
    if not kind and _SCHEME_LIKE.match(text):
        msg = f"{option}={value!r} is not a valid URI (a scheme needs '://'): {fix}"
        raise ConfigError(msg)
    if kind not in ("", *SCHEMES):
        msg = f"{option}={value!r} has an unsupported scheme {kind}://: {fix}"
        raise ConfigError(msg)
    rest = text.split("://", 1)[1] if kind else text
    if kind == "s3":
        bucket = rest.split("/", 1)[0]
        if not bucket or not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
            msg = (f"{option}={value!r} has no valid bucket name (lower-case letters, digits, "
                   f"'.' and '-'): {fix}")
            raise ConfigError(msg)
        return "s3://" + rest.rstrip("/")
    if kind == "file":
        if not rest.startswith("/"):
            msg = f"{option}={value!r} names a host or a relative path: {fix}"
            raise ConfigError(msg)
        rest = rest.rstrip("/") or "/"
        return rest.rstrip("/") or "/"
    # A plain path is the client's: relative to where the program runs.
    return os.path.abspath(os.path.expanduser(rest))


def filesystem(uri: str, config: Configuration) -> tuple[pafs.FileSystem, str]:
    """The file system holding ``uri`` and the path of ``uri`` in it. S3 takes the
    ``s3.*`` options (``s3.access-key`` unset: the AWS default credential chain).

    Raises ConfigError for an unsupported scheme, an ``s3://`` URI without a bucket or
    half-set credentials.
    """
    kind, path = split_uri(uri)
    if kind == "file":
        return pafs.LocalFileSystem(), path
    if not path.split("/", 1)[0]:
        msg = f"{uri!r} has no bucket (use s3://bucket/prefix)"
        raise ConfigError(msg)
    return s3_filesystem(config), path


def s3_filesystem(config: Configuration) -> pafs.S3FileSystem:
    """A pyarrow S3 file system configured from the ``s3.*`` options (one per process and
    settings: creating one resolves credentials and starts the SDK's thread pool)."""
    endpoint = config.get(options.S3_ENDPOINT)
    access_key = config.get(options.S3_ACCESS_KEY)
    secret_key = config.get(options.S3_SECRET_KEY)
    if (access_key is None) != (secret_key is None):
        msg = ("set both 's3.access-key' and 's3.secret-key', or neither to use the AWS "
               "default credential chain")
        raise ConfigError(msg)
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        msg = (f"invalid value for 's3.endpoint': {endpoint!r} "
               "(use a URL such as http://127.0.0.1:8333)")
        raise ConfigError(msg)
    return _s3(endpoint, config.get(options.S3_REGION) or "us-east-1", access_key,
               secret_key, bool(config.get(options.S3_PATH_STYLE)))


@functools.lru_cache(maxsize=8)
def _s3(endpoint: str | None, region: str, access_key: str | None, secret_key: str | None,
        path_style: bool) -> pafs.S3FileSystem:
    override, use_scheme = None, "https"
    if endpoint is not None:
        parts = urlsplit(endpoint)
        override, use_scheme = parts.netloc, parts.scheme
    return pafs.S3FileSystem(
        access_key=access_key, secret_key=secret_key, region=region,
        endpoint_override=override, scheme=use_scheme,
        force_virtual_addressing=not path_style,
        connect_timeout=5, request_timeout=60,
        # A missing bucket is an error to report, never something to create.
        allow_bucket_creation=False, allow_bucket_deletion=False)


def delete_tree(uri: str, config: Configuration) -> bool:
    """Delete ``uri`` and everything under it (an S3 prefix, or a local directory);
    False if nothing was there. A local symbolic link is refused (OSError), never
    followed."""
    fs, path = filesystem(uri, config)
    path = path.rstrip("/") or "/"
    if isinstance(fs, pafs.LocalFileSystem):
        if os.path.islink(path):
            msg = f"not deleting {path}: it is a symbolic link"
            raise OSError(msg)
        if not os.path.isdir(path):
            return False
    elif fs.get_file_info(path).type == pafs.FileType.NotFound:
        return False
    try:
        # S3: every object under the prefix and the directory marker that
        # delete_dir_contents would leave.
        fs.delete_dir(path)
    except FileNotFoundError:
        return False  # someone else deleted it meanwhile (the client and the JobMaster)
    return True
