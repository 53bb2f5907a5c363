"""Column values from their Postgres text form (what pgoutput and COPY send).

The decoding session pins ``TimeZone=UTC``, ``DateStyle=ISO, YMD``, ``IntervalStyle=postgres``,
``extra_float_digits=3`` and ``bytea_output=hex`` (see :data:`SESSION_OPTIONS`), so each type
has exactly one text form to parse. Types without a converter here stay text.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from cdc.errors import DecodeError
from warehouse.rows import json_text

#: libpq ``options`` that pin every setting a text value's form depends on.
SESSION_OPTIONS = (
    "-c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=postgres "
    "-c extra_float_digits=3 -c bytea_output=hex"
)

Converter = Callable[[str], Any]


def _bool(text: str) -> bool:
    if text not in ("t", "f", "true", "false"):  # boolout writes t/f; a ::text cast true/false
        raise ValueError(text)
    return text in ("t", "true")


def _float(text: str) -> float:
    return float(text)  # accepts NaN, Infinity, -Infinity as Postgres spells them


def _numeric(text: str) -> Decimal:
    return Decimal(text)


def _text(text: str) -> str:
    # uuid output is already canonical; json(b) is kept as Postgres wrote it (as Debezium
    # does), Postgres having validated it on the way in.
    return text


def _timestamptz(text: str) -> datetime:
    special = _INFINITE.get(text)
    if special is not None:
        return special
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"timestamptz without an offset: {text}")
    return value.astimezone(UTC)


def _timestamp(text: str) -> datetime:
    special = _INFINITE.get(text)
    return special.replace(tzinfo=None) if special is not None else datetime.fromisoformat(text)


def _date(text: str) -> date:
    special = _INFINITE.get(text)
    return special.date() if special is not None else date.fromisoformat(text)


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError("bytea not in hex output format")
    return bytes.fromhex(text[2:])


_INFINITE = {
    "infinity": datetime.max.replace(tzinfo=UTC),
    "-infinity": datetime.min.replace(tzinfo=UTC),
}

# Built-in type OIDs (pg_type.dat); arrays map to their element converter.
SCALARS: dict[int, Converter] = {
    16: _bool,
    20: int,
    21: int,
    23: int,
    26: int,
    700: _float,
    701: _float,
    1700: _numeric,
    25: _text,
    1042: _text,
    1043: _text,
    19: _text,
    2950: _text,
    114: _text,
    3802: _text,
    1184: _timestamptz,
    1114: _timestamp,
    1082: _date,
    17: _bytea,
}
ARRAY_ELEMENTS: dict[int, int] = {
    1000: 16,
    1016: 20,
    1005: 21,
    1007: 23,
    1028: 26,
    1021: 700,
    1022: 701,
    1231: 1700,
    1009: 25,
    1014: 1042,
    1015: 1043,
    1003: 19,
    2951: 2950,
    199: 114,
    3807: 3802,
    1185: 1184,
    1115: 1114,
    1182: 1082,
    1001: 17,
}


def converter(type_oid: int) -> Converter:
    """The text-to-value function for ``type_oid`` (see :func:`convert`), errors included."""
    element = ARRAY_ELEMENTS.get(type_oid)
    if element is not None:
        element_converter = SCALARS[element]
        parse: Converter = lambda text: parse_array(text, element_converter)  # noqa: E731
    else:
        parse = SCALARS.get(type_oid, _text)

    def run(text: str) -> Any:
        try:
            return parse(text)
        except (ValueError, InvalidOperation, OverflowError) as error:
            raise DecodeError(
                f"cannot decode {text[:80]!r} as type {type_oid}: {error}", type_oid=type_oid
            ) from error

    return parse if parse is _text else run


def convert(type_oid: int, text: str) -> Any:
    """The Python value of ``text``, a value of type ``type_oid`` in Postgres text form.

    Integers become ``int``, floats ``float``, numeric ``Decimal``, timestamptz an aware UTC
    ``datetime``, uuid and json(b) ``str``, bytea ``bytes``, arrays (nested) ``list``; others
    stay ``str``.
    """
    return converter(type_oid)(text)


def parse_array(text: str, element: Converter) -> list[Any]:
    """A Postgres array literal (``{1,2}``, ``{{"a b",NULL}}``, ``[0:1]={...}``) as nested
    lists; elements go through ``element``, ``NULL`` becomes ``None``."""
    if text.startswith("["):
        text = text[text.index("=") + 1 :]
    parser = _ArrayParser(text, element)
    value = parser.parse_list()
    if parser.pos != len(text):
        raise ValueError(f"trailing characters in array literal {text[:80]!r}")
    return value


class _ArrayParser:
    def __init__(self, text: str, element: Converter) -> None:
        self.text, self.element, self.pos = text, element, 0

    def parse_list(self) -> list[Any]:
        self._expect("{")
        items: list[Any] = []
        if self._peek() == "}":
            self.pos += 1
            return items
        while True:
            items.append(self._item())
            separator = self._peek()
            self.pos += 1
            if separator == "}":
                return items
            if separator != ",":
                raise ValueError(f"bad array literal at {self.pos}: {self.text[:80]!r}")

    def _item(self) -> Any:
        char = self._peek()
        if char == "{":
            return self.parse_list()
        if char == '"':
            return self.element(self._quoted())
        start = self.pos
        while self._peek() not in (",", "}"):
            self.pos += 1
        raw = self.text[start : self.pos].strip(" \t\n\r\v\f")  # as array_in, not unicode
        return None if raw.upper() == "NULL" else self.element(raw)

    def _quoted(self) -> str:
        self.pos += 1
        out = []
        while True:
            char = self._peek()
            self.pos += 1
            if char == "\\":
                out.append(self._peek())
                self.pos += 1
            elif char == '"':
                return "".join(out)
            else:
                out.append(char)

    def _peek(self) -> str:
        if self.pos >= len(self.text):
            raise ValueError(f"array literal ends early: {self.text[:80]!r}")
        return self.text[self.pos]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r} at {self.pos} in {self.text[:80]!r}")
        self.pos += 1


TextFixup = Callable[[bytes], bytes]


def warehouse_text(type_oid: int) -> TextFixup | None:
    """How a value of ``type_oid`` in Postgres text form becomes the text the warehouse casts
    (the form the initial snapshot's COPY writes), or ``None`` when it already is: arrays
    become JSON, ``bytea`` loses its ``\\x`` prefix. Everything else DuckDB casts directly."""
    element = ARRAY_ELEMENTS.get(type_oid)
    if element is not None:
        parse = converter(type_oid)
        return lambda raw: json_text(parse(raw.decode()))
    if type_oid == _BYTEA:
        return _strip_hex_prefix
    return None


_BYTEA = 17


def _strip_hex_prefix(raw: bytes) -> bytes:
    if not raw.startswith(b"\\x"):
        raise DecodeError("bytea not in hex output format", type_oid=_BYTEA)
    return raw[2:]
