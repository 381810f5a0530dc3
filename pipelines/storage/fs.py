"""Where an output lives: a local folder or an object store (docs/storage.md).

An output is a filesystem path or a URL of an object store: ``s3a://bucket/prefix`` (also
``s3://``), ``gs://bucket/prefix``, ``abfss://container@account.dfs.core.windows.net/prefix``
(also ``abfs://``). Every library is given the location the way it takes it, so that the
tables, the streaming checkpoint and the work folder (``_work``: manifest, state, staging,
window and quarantine files) all live there:

- Spark and delta-spark: the URL as given (``s3a://`` through ``hadoop-aws``; its settings from
  the ``AWS_*`` variables, :func:`spark_s3a_conf`, or from the cluster's own configuration).
- delta-rs: the URL as given, with :func:`delta_storage_options` (it reads the ``AWS_*``,
  ``GOOGLE_*`` and ``AZURE_*`` variables itself).
- pyarrow (the work folder's files, the staging and window Parquet): the filesystem
  :func:`arrow_filesystem` returns (``pyarrow.fs.S3FileSystem`` configured from the same
  ``AWS_*`` variables; ``FileSystem.from_uri`` for the others).

The S3 settings come from the usual variables: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``), ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``; an S3-compatible
store: MinIO, Ceph, moto) and ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST``: with an endpoint, requests
are path style (``http://host/bucket/key``) unless it is ``true``; an ``http://`` endpoint is
allowed as such. Without an endpoint each library uses AWS's own.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

S3_SCHEMES = ("s3a", "s3")
OBJECT_STORE_SCHEMES = (*S3_SCHEMES, "gs", "abfs", "abfss")
"""URL schemes an output may have (docs/storage.md); S3's is tested, the others documented."""


class StorageError(ValueError):
    """An output location that cannot be used (unsupported scheme, missing jars)."""


def scheme(location: str) -> str | None:
    """The URL scheme of ``location`` (``"s3a"``), or ``None`` for a filesystem path."""
    if "://" not in location:
        return None
    return location.split("://", 1)[0].lower()


def is_remote(location: str) -> bool:
    """Whether ``location`` is an object-store URL rather than a filesystem path."""
    return scheme(location) is not None


def check_location(location: str) -> None:
    """Raise :class:`StorageError` (one sentence) when ``location`` is a URL whose scheme is
    not one of :data:`OBJECT_STORE_SCHEMES`, or a ``file:`` URL (give the path)."""
    s = scheme(location)
    if location.startswith("file:"):
        raise StorageError(f"output {location} is a file: URL; give the filesystem path")
    if s is not None and s not in OBJECT_STORE_SCHEMES:
        raise StorageError(f"output {location} has the scheme {s}://, which is not supported; "
                           f"use a filesystem path or one of "
                           f"{', '.join(f'{x}://' for x in OBJECT_STORE_SCHEMES)} "
                           f"(docs/storage.md)")


def absolute(location: str) -> str:
    """``location`` with a filesystem path made absolute (executors resolve it themselves);
    a URL unchanged but for a trailing ``/``."""
    return location.rstrip("/") if is_remote(location) else os.path.abspath(location)


def join(location: str, *parts: str) -> str:
    """``location`` / ``parts``, for a path or a URL alike (``/`` separators)."""
    return posixpath.join(location, *parts)


def s3_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint URL of the environment (``AWS_ENDPOINT_URL_S3``, else
    ``AWS_ENDPOINT_URL``); ``None``: AWS's own."""
    env = os.environ if env is None else env
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def s3_region(env: Mapping[str, str] | None = None) -> str | None:
    """``AWS_REGION``, else ``AWS_DEFAULT_REGION`` (``None`` when neither is set)."""
    env = os.environ if env is None else env
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def _virtual_hosted(env: Mapping[str, str]) -> bool:
    return env.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() in ("1", "true", "yes")


def arrow_filesystem(location: str) -> tuple[Any, str]:
    """``(pyarrow.fs.FileSystem, path in it)`` for a path or URL; a filesystem path is made
    absolute. ``s3a://`` / ``s3://``: a ``pyarrow.fs.S3FileSystem`` from the ``AWS_*``
    variables (see the module docstring; credentials by the AWS SDK's default chain), the
    path ``bucket/prefix``. Other URLs: ``pyarrow.fs.FileSystem.from_uri``. Raises
    :class:`StorageError` for an unsupported scheme (:func:`check_location`)."""
    s = scheme(location)
    if s is None:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    check_location(location)
    if s in S3_SCHEMES:
        return s3_filesystem(), location.split("://", 1)[1].rstrip("/")
    fs, path = pafs.FileSystem.from_uri(location)
    return fs, path


def s3_filesystem(env: Mapping[str, str] | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` configured from the ``AWS_*`` variables of ``env``
    (default: the process environment)."""
    env = os.environ if env is None else env
    options: dict[str, Any] = {"region": s3_region(env)}
    endpoint = s3_endpoint(env)
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.update(endpoint_override=parts.netloc, scheme=parts.scheme,
                       force_virtual_addressing=_virtual_hosted(env))
    return pafs.S3FileSystem(**{k: v for k, v in options.items() if v is not None})


def delta_storage_options(location: str,
                          env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for a table under ``location`` (``None`` for a path).

    delta-rs reads the ``AWS_*`` variables itself; for S3 this adds what it does not derive:
    ``AWS_ALLOW_HTTP`` for an ``http://`` endpoint, and how commits are made safe when the
    environment chose nothing (``AWS_S3_LOCKING_PROVIDER``, ``AWS_S3_ALLOW_UNSAFE_RENAME`` or
    ``AWS_CONDITIONAL_PUT``): conditional put (``If-None-Match``, which S3 and the common
    S3-compatible stores honour), so that two writers never both commit one log version."""
    env = os.environ if env is None else env
    if scheme(location) not in S3_SCHEMES:
        return None
    options: dict[str, str] = {}
    endpoint = s3_endpoint(env)
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    region = s3_region(env)
    if region:
        options["AWS_REGION"] = region
    if not any(env.get(k) for k in ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME",
                                    "AWS_CONDITIONAL_PUT")):
        options["conditional_put"] = "etag"
    return options


def spark_s3a_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings for ``s3a://`` from the ``AWS_*`` variables of ``env`` (default: the
    process environment): the endpoint (``fs.s3a.endpoint``; path-style access unless
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST``, SSL off for ``http://``, local files uploaded as
    streams) and the region
    (``fs.s3a.endpoint.region``), and those variables for the executors' Python workers
    (``spark.executorEnv.*``: they open staging and window files with pyarrow); ``{}`` when
    none is set. Credentials are not copied (settings show in Spark's UI): S3A's default
    provider chain and pyarrow read ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` from the
    environment themselves (on a cluster: the executors' environment, or instance roles)."""
    env = os.environ if env is None else env
    conf: dict[str, str] = {}
    endpoint = s3_endpoint(env)
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = str(not _virtual_hosted(env)).lower()
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            not endpoint.startswith("http://")).lower()
        # copyFromLocalFile (the state store's upload of its RocksDB files) through an output
        # stream, as every other write, not S3A's optimized whole-file PUT: an S3-compatible
        # server may answer that PUT's "Expect: 100-continue" in a way the SDK reads as a
        # final status 100 (moto's does: every upload failed); AWS is reached without an
        # endpoint and keeps the optimized path
        conf["spark.hadoop.fs.s3a.optimized.copy.from.local.enabled"] = "false"
    region = s3_region(env)
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    # the executors' Python workers open the work folder's files with pyarrow: the same store
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"):
        if env.get(name):
            conf[f"spark.executorEnv.{name}"] = env[name]
    return conf


# ---- the work folder's files (pyarrow.fs; a path or a URL alike) ---------------------------------

def is_file(location: str) -> bool:
    """Whether ``location`` is a file (an object)."""
    fs, path = arrow_filesystem(location)
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def is_dir(location: str) -> bool:
    """Whether ``location`` is a folder (on an object store: a prefix holding objects)."""
    fs, path = arrow_filesystem(location)
    return bool(fs.get_file_info(path).type == pafs.FileType.Directory)


def read_bytes(location: str) -> bytes:
    """The content of the file ``location`` (``FileNotFoundError`` when it is missing)."""
    fs, path = arrow_filesystem(location)
    with fs.open_input_stream(path) as f:
        return bytes(f.read())


def write_bytes(location: str, data: bytes | pa.Buffer) -> None:
    """Write ``data`` (bytes or an Arrow buffer) to ``location`` whole or not at all
    (:func:`output_stream`). Creates the parent folder."""
    with output_stream(location) as f:
        f.write(data)


@contextmanager
def output_stream(location: str, buffer_size: int | None = None) -> Iterator[Any]:
    """An Arrow output stream whose bytes appear at ``location`` whole or not at all: written
    to a hidden temporary file, moved into place when the ``with`` block ends without an error
    (a rename on a filesystem; on an object store the object appears whole when its upload
    completes); the temporary file is deleted when the block raises. Creates the parent
    folder. ``buffer_size`` (bytes): writes gathered in a buffer of that size (``None``: each
    write goes to the file as it comes), for a writer that streams many small pieces."""
    fs, path = arrow_filesystem(location)
    folder, name = path.rsplit("/", 1)
    fs.create_dir(folder, recursive=True)
    tmp = f"{folder}/.{name}.tmp"
    try:
        with fs.open_output_stream(tmp, buffer_size=buffer_size) as f:
            yield f
    except BaseException:
        if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
            fs.delete_file(tmp)
        raise
    fs.move(tmp, path)


def list_files(location: str, suffix: str = "") -> list[str]:
    """Names (not paths) of the files directly in the folder ``location`` ending with
    ``suffix``, sorted; ``[]`` when the folder does not exist."""
    fs, path = arrow_filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos
                  if i.type == pafs.FileType.File and i.base_name.endswith(suffix))


def delete_dir(location: str) -> None:
    """Delete the folder ``location`` and everything in it (nothing when it is missing)."""
    fs, path = arrow_filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def copy_dir(source: str, destination: str) -> None:
    """Copy the folder ``source`` to ``destination`` (replaced when it exists):
    ``pyarrow.fs.copy_files``."""
    delete_dir(destination)
    src_fs, src = arrow_filesystem(source)
    dst_fs, dst = arrow_filesystem(destination)
    dst_fs.create_dir(dst, recursive=True)  # a local destination must exist to copy into
    pafs.copy_files(src, dst, source_filesystem=src_fs, destination_filesystem=dst_fs)


def count_rows(location: str, where: Any = None) -> int:
    """Rows of the Parquet dataset under the folder ``location`` (those matching the pyarrow
    expression ``where``); 0 when the folder does not exist."""
    if not is_dir(location):
        return 0
    fs, path = arrow_filesystem(location)
    return int(ds.dataset(path, filesystem=fs, format="parquet").count_rows(filter=where))
