"""Checkpoint storage on S3 or an S3-compatible service (``s3://bucket/prefix``).

Objects are written with one PUT (small) or a multipart upload (large); both become visible
only when complete, which is what makes writes atomic. The CRC-32 in each handle is computed
locally and checked on every read. Failures the user can fix (wrong credentials, a missing
bucket, an unreachable endpoint) become one-line :class:`~weir.core.errors.UserError`\\ s naming
the option to change, never a botocore traceback.

Example:
    >>> storage = S3CheckpointStorageAccess(                              # doctest: +SKIP
    ...     "checkpoints", "prod", endpoint="http://127.0.0.1:8333",
    ...     access_key="AK", secret_key="SK")
    >>> handle = storage.write("job/chk-1/state-0", b"abc")         # doctest: +SKIP
    >>> handle.uri                                                  # doctest: +SKIP
    's3://checkpoints/prod/job/chk-1/state-0'
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    FlexibleChecksumError,
    NoCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from weir.checkpoint.filesystem import atomic_local_write
from weir.checkpoint.storage import (
    CHUNK_SIZE,
    CheckpointStorageAccess,
    Checksum,
    StreamStateHandle,
    check_relative,
    checksum_of,
    contained_relative,
    file_checksum,
    outside_error,
    target_uri,
    verify,
)
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    CorruptStateError,
    MissingStateError,
    StorageAccessError,
    StorageError,
    StorageUnreachableError,
)

#: Error codes that mean "these credentials are not accepted" (HEAD answers carry only "403").
_CREDENTIAL_CODES = frozenset({
    "403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
    "ExpiredToken", "InvalidSecurity", "AuthorizationHeaderMalformed",
})
_MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_DELETE_BATCH = 1000  # the DeleteObjects limit
_MIB = 1024 * 1024
#: A single CopyObject request copies at most 5 GiB (the S3 limit).
_COPY_OBJECT_LIMIT = 5 * 1024 * _MIB


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


#: Error codes of a service that cannot answer now (S3's 5xx answers and throttling).
_UNAVAILABLE_CODES = frozenset({"InternalError", "ServiceUnavailable", "SlowDown",
                                "RequestTimeout", "503"})


def _status(err: ClientError) -> int | None:
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _parse_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        msg = f"{uri!r} is not an s3:// URI"
        raise ValueError(msg)
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


def has_local_credentials(config: Configuration | None = None) -> bool:
    """Whether this process holds S3 credentials: ``s3.access-key`` (config or
    ``WEIR_S3_ACCESS_KEY``), or any that boto3's default chain finds (environment,
    ``~/.aws``, an instance role). A client host may hold none while the daemons do.

    Example:
        >>> has_local_credentials(Configuration.from_pairs({
        ...     "s3.access-key": "k", "s3.secret-key": "s"}))
        True
    """
    from weir.core.options import S3_ACCESS_KEY

    conf = config if config is not None else Configuration()
    if conf.get(S3_ACCESS_KEY) is not None:
        return True
    return boto3.session.Session().get_credentials() is not None


@functools.lru_cache(maxsize=32)
def _client(endpoint: str | None, region: str, access_key: str | None,
            secret_key: str | None, path_style: bool) -> Any:
    """One boto3 S3 client per process and settings. Creating one takes 70-130 ms of CPU
    (measured), and every task's restore and snapshot storage used to make its own; boto3
    clients are thread-safe, so they are shared."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=region,
        aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        config=Config(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5, read_timeout=60,
            # S3-compatible servers rarely have wildcard DNS for bucket subdomains.
            s3={"addressing_style": "path" if path_style else "virtual"}))


class S3CheckpointStorageAccess(CheckpointStorageAccess):
    """Checkpoint storage in an S3 bucket under an optional key prefix.

    ``access_key``/``secret_key`` None means boto3's default credential chain (environment,
    ``~/.aws``, instance roles). ``endpoint`` None means AWS itself.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint: str | None = None,
                 access_key: str | None = None, secret_key: str | None = None,
                 region: str = "us-east-1", path_style: bool = True,
                 multipart_threshold: int = 8 * _MIB, multipart_chunksize: int = 8 * _MIB,
                 ) -> None:
        if not bucket:
            msg = "S3 checkpoint location needs a bucket: s3://bucket/prefix"
            raise ConfigError(msg)
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            msg = (f"invalid value for 's3.endpoint': {endpoint!r} "
                   "(use a URL such as http://127.0.0.1:8333)")
            raise ConfigError(msg)
        if (access_key is None) != (secret_key is None):
            msg = ("set both 's3.access-key' and 's3.secret-key', or neither to use the AWS "
                   "default credential chain")
            raise ConfigError(msg)
        try:
            self._prefix = check_relative(prefix, allow_empty=True)
        except ValueError as err:
            msg = f"invalid S3 key prefix {prefix!r} for bucket '{bucket}': {err}"
            raise ConfigError(msg) from err
        self.bucket = bucket
        self.endpoint = endpoint
        self.region = region
        self._client: Any = _client(endpoint, region, access_key, secret_key, path_style)
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold, multipart_chunksize=multipart_chunksize,
            max_concurrency=4,
            # The CRT client (when awscrt is installed) reports errors differently; stay on
            # the classic one so the error translation below holds.
            preferred_transfer_client="classic")
        # One part at a time: a background upload's parts in parallel crowded out the
        # uploads a checkpoint waits for (the state change log's tail) at the server.
        self._background = TransferConfig(
            multipart_threshold=multipart_threshold, multipart_chunksize=multipart_chunksize,
            max_concurrency=1, preferred_transfer_client="classic")

    @classmethod
    def from_uri(cls, uri: str, config: Configuration | None = None) -> S3CheckpointStorageAccess:
        """The storage for ``s3://bucket/prefix``, configured from the ``s3.*`` options."""
        from weir.core.options import (
            S3_ACCESS_KEY,
            S3_ENDPOINT,
            S3_PATH_STYLE,
            S3_REGION,
            S3_SECRET_KEY,
        )

        conf = config if config is not None else Configuration()
        bucket, prefix = _parse_s3_uri(uri)
        if not bucket:
            msg = f"S3 checkpoint location {uri!r} has no bucket (use s3://bucket/prefix)"
            raise ConfigError(msg)
        return cls(bucket, prefix, endpoint=conf.get(S3_ENDPOINT),
                   access_key=conf.get(S3_ACCESS_KEY), secret_key=conf.get(S3_SECRET_KEY),
                   region=conf.get(S3_REGION) or "us-east-1",
                   path_style=bool(conf.get(S3_PATH_STYLE)))

    # -- paths ------------------------------------------------------------------------------

    @property
    def base_uri(self) -> str:
        return f"s3://{self.bucket}/{self._prefix}".rstrip("/")

    def _key(self, relative_path: str) -> str:
        relative = check_relative(relative_path)
        return f"{self._prefix}/{relative}" if self._prefix else relative

    def _dir_prefix(self, relative_prefix: str) -> str:
        """The key prefix of a directory-like relative prefix ('' for the whole storage)."""
        relative = check_relative(relative_prefix, allow_empty=True)
        joined = "/".join(p for p in (self._prefix, relative) if p)
        return joined + "/" if joined else ""

    def _where(self) -> str:
        return self.endpoint or "AWS S3 (no s3.endpoint set)"

    # -- error translation ------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, bucket: str, uri: str) -> Iterator[None]:
        """Turn botocore failures into weir errors that say what to fix."""
        try:
            yield
        except BotoConnectionError as err:
            # EndpointConnectionError and ConnectTimeoutError, after the retries.
            msg = (f"cannot reach S3 endpoint {self._where()} ({err}); check 's3.endpoint' "
                   "and that the service is running")
            raise StorageUnreachableError(msg) from err
        except NoCredentialsError as err:
            msg = (f"no S3 credentials for {self._where()}, bucket '{bucket}': set "
                   "'s3.access-key' and 's3.secret-key'")
            raise StorageAccessError(msg) from err
        except FlexibleChecksumError as err:
            # The service's own checksum of the response did not match: corrupt in transit.
            msg = f"state object {uri} is corrupt: {err}"
            raise CorruptStateError(msg) from err
        except ClientError as err:
            raise self._client_error(err, bucket, uri) from err
        except BotoCoreError as err:
            msg = f"S3 request for {uri} at {self._where()} failed: {err}"
            raise StorageError(msg) from err

    def _client_error(self, err: ClientError, bucket: str, uri: str) -> StorageError:
        code = _code(err)
        if code == "NoSuchBucket":
            return StorageAccessError(
                f"bucket '{bucket}' does not exist at S3 endpoint {self._where()}: create it, "
                f"or point the location ({self.base_uri}) at an existing bucket")
        if code in _CREDENTIAL_CODES or _status(err) == 403:
            return StorageAccessError(
                f"S3 endpoint {self._where()} refused access to bucket '{bucket}' ({code}): "
                "check 's3.access-key' / 's3.secret-key' and that this identity may use "
                "the bucket")
        message = err.response.get("Error", {}).get("Message", "")
        status = _status(err)
        if code in _UNAVAILABLE_CODES or (status is not None and status >= 500):
            # The service answers, but cannot serve now (starting, overloaded, a backend
            # down) even after botocore's retries: as unreachable, so a restore waits for
            # it instead of taking its checkpoints for broken.
            detail = f"{code or status}: {message}" if message else f"{code or status}"
            return StorageUnreachableError(
                f"S3 endpoint {self._where()} cannot serve {uri} now ({detail}); it is "
                "starting, overloaded or failing: check that the service is healthy")
        return StorageError(f"S3 request for {uri} at {self._where()} failed: "
                            f"{code or status} {message}".rstrip())

    def _raise_if_bucket_missing(self, bucket: str, uri: str) -> None:
        # HEAD answers have no body, so a 404 does not say whether the key or the bucket is
        # missing; ask about the bucket only on this (rare) path.
        try:
            self._client.head_bucket(Bucket=bucket)
        except ClientError as err:
            if _status(err) == 404:
                missing = ClientError({"Error": {"Code": "NoSuchBucket"}}, "HeadBucket")
                raise self._client_error(missing, bucket, uri) from err
            raise

    # -- writes -----------------------------------------------------------------------------

    def write(self, relative_path: str, data: bytes | bytearray | memoryview
              ) -> StreamStateHandle:
        key = self._key(relative_path)
        uri = f"s3://{self.bucket}/{key}"
        body = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        with self._errors(self.bucket, uri):
            if len(body) >= self._transfer.multipart_threshold:
                self._client.upload_fileobj(io.BytesIO(body), self.bucket, key,
                                            Config=self._transfer)
            else:
                self._client.put_object(Bucket=self.bucket, Key=key, Body=body)
        return StreamStateHandle(uri, len(body), checksum_of(body))

    def write_file(self, relative_path: str, local_path: str | Path, *,
                   background: bool = False) -> StreamStateHandle:
        key = self._key(relative_path)
        uri = f"s3://{self.bucket}/{key}"
        # A separate pass: multipart parts are read and retried out of order, so hashing the
        # stream as it is uploaded would not be reliable. CRC-32C is far faster than the wire.
        length, checksum = file_checksum(local_path)
        with open(local_path, "rb") as f, self._errors(self.bucket, uri):
            # upload_fileobj, not upload_file: the latter wraps every ClientError in
            # S3UploadFailedError, losing the error code we translate.
            self._client.upload_fileobj(f, self.bucket, key, Config=self._background
                                        if background else self._transfer)
        return StreamStateHandle(uri, length, checksum)

    def copy(self, source: StreamStateHandle, relative_path: str) -> StreamStateHandle:
        """Server-side (``CopyObject``; above its 5 GB limit boto3's managed multipart
        copy) when ``source`` is in this S3 service: no byte passes through this process.
        One request per object rather than ranged part copies: SeaweedFS copies 1 GB of
        64 MB objects in 3.4 s that way against 4.1 s in 8 MB parts."""
        if not source.uri.startswith("s3://"):
            return super().copy(source, relative_path)
        bucket, key = _parse_s3_uri(source.uri)
        target = self._key(relative_path)
        uri = f"s3://{self.bucket}/{target}"
        with self._errors(self.bucket, uri):
            try:
                head = self._client.head_object(Bucket=bucket, Key=key)
            except ClientError as err:
                if _status(err) == 404:
                    msg = f"state object {source.uri} does not exist"
                    raise MissingStateError(msg) from None
                raise
            length = int(head["ContentLength"])
            verify(source, length, None)
            if length < _COPY_OBJECT_LIMIT:
                self._client.copy_object(CopySource={"Bucket": bucket, "Key": key},
                                         Bucket=self.bucket, Key=target)
            else:
                self._client.copy({"Bucket": bucket, "Key": key}, self.bucket, target,
                                  Config=self._transfer)
        return StreamStateHandle(uri, source.length, source.checksum)

    # -- reads ------------------------------------------------------------------------------

    def _get(self, handle: StreamStateHandle) -> Any:
        bucket, key = _parse_s3_uri(handle.uri)
        try:
            response = self._client.get_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if _code(err) in _MISSING_KEY_CODES:
                msg = f"state object {handle.uri} does not exist"
                raise MissingStateError(msg) from None
            raise
        try:
            # Fail on a wrong size before transferring (possibly gigabytes of) the wrong body.
            verify(handle, int(response["ContentLength"]), None)
        except BaseException:
            response["Body"].close()
            raise
        return response

    def read(self, handle: StreamStateHandle) -> bytes:
        bucket, _ = _parse_s3_uri(handle.uri)
        with self._errors(bucket, handle.uri):
            response = self._get(handle)
            with contextlib.closing(response["Body"]) as body:
                data: bytes = body.read()
        verify(handle, len(data), checksum_of(data, handle.checksum))
        return data

    def download(self, handle: StreamStateHandle, local_path: str | Path) -> None:
        bucket, _ = _parse_s3_uri(handle.uri)
        with self._errors(bucket, handle.uri):
            response = self._get(handle)
            with contextlib.closing(response["Body"]) as body:
                def copy(f: BinaryIO) -> None:
                    crc = Checksum(handle.checksum)
                    for chunk in body.iter_chunks(CHUNK_SIZE):
                        crc.update(chunk)
                        f.write(chunk)
                    # Inside fill: a mismatch discards the temp file, not the destination.
                    verify(handle, crc.length, crc.hexdigest())

                atomic_local_write(local_path, copy)

    def exists(self, target: StreamStateHandle | str) -> bool:
        uri = target_uri(target)
        bucket, key = _parse_s3_uri(uri)
        with self._errors(bucket, uri):
            try:
                self._client.head_object(Bucket=bucket, Key=key)
            except ClientError as err:
                if _status(err) != 404:
                    raise
                self._raise_if_bucket_missing(bucket, uri)
                return False
        return True

    def _list_keys(self, key_prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=key_prefix):
            # Keys ending in '/' are folder markers some tools create, not state objects.
            keys.extend(o["Key"] for o in page.get("Contents", ()) if not o["Key"].endswith("/"))
        return keys

    def list(self, relative_prefix: str = "") -> list[str]:
        key_prefix = self._dir_prefix(relative_prefix)
        uri = f"s3://{self.bucket}/{key_prefix}"
        with self._errors(self.bucket, uri):
            keys = self._list_keys(key_prefix)
        return sorted(f"s3://{self.bucket}/{key}" for key in keys)

    # -- deletes ----------------------------------------------------------------------------

    def _contained_key(self, uri: str) -> str:
        """The key of ``uri`` if it names an object below this storage's bucket and prefix;
        else raises TargetOutsideStorageError."""
        try:
            bucket, key = _parse_s3_uri(uri)
        except ValueError as err:
            raise outside_error(uri, self.base_uri) from err
        below = f"{self._prefix}/" if self._prefix else ""
        if bucket != self.bucket or not key.startswith(below):
            raise outside_error(uri, self.base_uri)
        # S3 keys are opaque, but S3-compatible servers backed by a file system may
        # collapse '..': refuse such keys rather than trust every server to keep them.
        contained_relative(key[len(below):], self.base_uri)
        return key

    def delete(self, target: StreamStateHandle | str) -> None:
        uri = target_uri(target)
        key = self._contained_key(uri)
        with self._errors(self.bucket, uri):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def delete_prefix(self, relative_prefix: str) -> None:
        contained_relative(relative_prefix, self.base_uri, allow_empty=True)
        key_prefix = self._dir_prefix(relative_prefix)
        uri = f"s3://{self.bucket}/{key_prefix}"
        with self._errors(self.bucket, uri):
            keys = self._list_keys(key_prefix)
            for start in range(0, len(keys), _DELETE_BATCH):
                batch = keys[start:start + _DELETE_BATCH]
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
                # DeleteObjects answers 200 even when single keys fail; check each.
                errors = response.get("Errors") or []
                if errors:
                    first = errors[0]
                    msg = (f"could not delete {len(errors)} object(s) under {uri}, e.g. "
                           f"s3://{self.bucket}/{first.get('Key')}: {first.get('Code')} "
                           f"{first.get('Message', '')}".rstrip())
                    raise StorageError(msg)

    # -- multipart uploads completed later (two-phase commit) ----------------------------------

    def upload_parts(self, relative_path: str, local_path: str | Path,
                     part_size: int = 8 * _MIB) -> tuple[str, builtins.list[builtins.list[Any]]]:
        """Start a multipart upload of ``local_path`` to ``relative_path`` and upload all
        its parts, without completing it: the object does not exist until
        :meth:`complete_upload`. Returns (upload id, [[part number, ETag], ...])."""
        key = self._key(relative_path)
        uri = f"s3://{self.bucket}/{key}"
        with self._errors(self.bucket, uri):
            upload_id = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=key)["UploadId"]
            parts: list[list[Any]] = []
            with open(local_path, "rb") as f:
                number = 1
                while True:
                    chunk = f.read(part_size)
                    if not chunk and parts:
                        break
                    etag = self._client.upload_part(Bucket=self.bucket, Key=key,
                                                    UploadId=upload_id, PartNumber=number,
                                                    Body=chunk)["ETag"]
                    parts.append([number, etag])
                    number += 1
                    if len(chunk) < part_size:
                        break
        return upload_id, parts

    def complete_upload(self, relative_path: str, upload_id: str,
                        parts: builtins.list[builtins.list[Any]]) -> None:
        """Complete an upload of :meth:`upload_parts`: the object appears at once, whole.
        Idempotent: an upload completed before (its object exists) is fine; raises
        MissingStateError when neither the upload nor the object exists."""
        key = self._key(relative_path)
        uri = f"s3://{self.bucket}/{key}"
        with self._errors(self.bucket, uri):
            try:
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag}
                                               for n, etag in parts]})
                return
            except ClientError as err:
                if _code(err) not in ("NoSuchUpload", "404"):
                    raise
        if not self.exists(uri):
            msg = (f"pending upload {upload_id} of {uri} is gone and the object does not "
                   "exist, so its records cannot be committed")
            raise MissingStateError(msg)

    def list_uploads(self, relative_prefix: str = "") -> builtins.list[tuple[str, str]]:
        """Uploads started and neither completed nor aborted, as (relative path, id)."""
        key_prefix = "/".join(p for p in (self._prefix, relative_prefix) if p)
        uri = f"s3://{self.bucket}/{key_prefix}"
        found: list[tuple[str, str]] = []
        with self._errors(self.bucket, uri):
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=key_prefix):
                for upload in page.get("Uploads", ()):
                    relative = upload["Key"][len(self._prefix) + 1:] if self._prefix \
                        else upload["Key"]
                    found.append((relative, upload["UploadId"]))
        return found

    def abort_upload(self, relative_path: str, upload_id: str) -> None:
        key = self._key(relative_path)
        with self._errors(self.bucket, f"s3://{self.bucket}/{key}"):
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key,
                                                    UploadId=upload_id)
            except ClientError as err:
                if _code(err) != "NoSuchUpload":
                    raise

    # -- administration ---------------------------------------------------------------------

    def check_access(self) -> None:
        # Listing one key proves the endpoint, the credentials and the bucket at once (a
        # storage needs ListBucket anyway, for delete_prefix); nothing is written.
        with self._errors(self.bucket, self.base_uri):
            try:
                self._client.list_objects_v2(Bucket=self.bucket, Prefix=self._dir_prefix(""),
                                             MaxKeys=1)
            except NoCredentialsError:
                # No keys here (a client host): the daemons have their own, which this
                # process cannot check; their first checkpoint will.
                return

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for an embedded or test S3 service)."""
        with self._errors(self.bucket, self.base_uri):
            try:
                self._client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as err:
                if _status(err) != 404:
                    raise
            kwargs: dict[str, Any] = {"Bucket": self.bucket}
            if self.region != "us-east-1":
                # us-east-1 is the one region that rejects an explicit location constraint.
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
            try:
                self._client.create_bucket(**kwargs)
            except ClientError as err:
                # Someone (another TaskExecutor) created it first: that is what we wanted.
                if _code(err) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
