"""PyFlink's ``pyflink.datastream.formats.parquet``: Java Parquet readers and writers,
which weir does not have; ``FileSource(path, format="parquet")`` reads Parquet and
``FileSink(path, format="parquet")`` writes it.

Example:
    >>> len(__unsupported__)
    4
"""

from __future__ import annotations

from weir.unsupported import FILES, refusing

__all__: list[str] = []

__unsupported__ = dict.fromkeys(["AvroParquetReaders", "AvroParquetWriters",
                                 "ParquetColumnarRowInputFormat", "ParquetBulkWriters"], FILES)
__getattr__ = refusing(__name__, __unsupported__)
