"""Type information for record streams (``output_type=``), mapped onto Arrow types.

Names follow PyFlink's ``Types`` so job code reads the same.

Example:
    >>> from weir import Types
    >>> Types.TUPLE([Types.STRING(), Types.LONG()]).arrow_schema().names
    ['f0', 'f1']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

#: How a batch's rows map back to Python values; stored in the Arrow schema metadata.
KIND_KEY = b"weir.kind"
KIND_SCALAR = b"scalar"
KIND_TUPLE = b"tuple"
KIND_DICT = b"dict"
KIND_ROW = b"row"
KIND_PICKLE = b"pickle"


@dataclass(frozen=True)
class TypeInformation:
    """The Arrow type of a record, and how its rows become Python values."""

    arrow_type: pa.DataType | None
    kind: bytes = KIND_SCALAR
    fields: tuple[tuple[str, TypeInformation], ...] = ()

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of a batch of records of this type."""
        meta = {KIND_KEY: self.kind}
        if self.kind == KIND_PICKLE:
            return pa.schema([("_pickled", pa.binary())], metadata=meta)
        if self.kind == KIND_SCALAR:
            return pa.schema([("f0", self.arrow_type)], metadata=meta)
        return pa.schema([(name, t.arrow_type) for name, t in self.fields], metadata=meta)


class Types:
    """Factory of :class:`TypeInformation`, named as PyFlink's ``Types``."""

    @staticmethod
    def STRING() -> TypeInformation:  # noqa: N802 - PyFlink's names
        return TypeInformation(pa.string())

    @staticmethod
    def LONG() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int64())

    @staticmethod
    def INT() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.int32())

    @staticmethod
    def DOUBLE() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.float64())

    @staticmethod
    def FLOAT() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.float32())

    @staticmethod
    def BOOLEAN() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.bool_())

    @staticmethod
    def BYTES() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.binary())

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:  # noqa: N802
        return TypeInformation(pa.timestamp("us"))

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:  # noqa: N802
        return TypeInformation(None, KIND_PICKLE)

    @staticmethod
    def TUPLE(types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        fields = tuple((f"f{i}", t) for i, t in enumerate(types))
        return TypeInformation(None, KIND_TUPLE, fields)

    @staticmethod
    def ROW_NAMED(names: Sequence[str], types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        if len(names) != len(types):
            msg = "ROW_NAMED needs as many names as types"
            raise ValueError(msg)
        return TypeInformation(None, KIND_ROW, tuple(zip(names, types, strict=True)))

    @staticmethod
    def MAP_RECORD(names: Sequence[str], types: Sequence[TypeInformation]) -> TypeInformation:  # noqa: N802
        """Dict records with these keys."""
        return TypeInformation(None, KIND_DICT, tuple(zip(names, types, strict=True)))
