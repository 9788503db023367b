"""PyFlink's ``pyflink.datastream.formats``: Java file formats, which weir does not have;
``FileSource(path, format=...)`` reads Parquet, CSV and JSON lines and ``FileSink(path,
format=...)`` writes them. The modules below import, and refuse every PyFlink name in one
line saying so.

Example:
    >>> from weir.datastream.formats import csv
    >>> sorted(csv.__unsupported__)[0]
    'CsvBulkWriters'
"""

from __future__ import annotations

from weir.unsupported import FILES, java_connector, refuse_modules

__all__: list[str] = []

refuse_modules({f"{__name__}.avro": java_connector("the Avro format", FILES),
                f"{__name__}.orc": java_connector("the ORC format", FILES)})
