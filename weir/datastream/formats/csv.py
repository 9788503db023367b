"""PyFlink's ``pyflink.datastream.formats.csv``: Java CSV formats and schemas, which weir
does not have; ``FileSource(path, format="csv")`` reads CSV.

Example:
    >>> len(__unsupported__)
    6
"""

from __future__ import annotations

from weir.unsupported import FILES, SCHEMAS, refusing

__all__: list[str] = []

__unsupported__ = {
    **dict.fromkeys(["CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat", "CsvBulkWriters"],
                    FILES),
    **dict.fromkeys(["CsvRowDeserializationSchema", "CsvRowSerializationSchema"], SCHEMAS),
}
__getattr__ = refusing(__name__, __unsupported__)
