"""Spark's DDL schema strings (`"user_id string not null, ts long"`) parsed without Spark.

Owns the parse from a DDL string to a `Field` tree, so a job's declared JSON schema is checked
when the job is declared (at import, with no SparkSession yet) and its mistakes are named
there. Covers the types a JSON record can carry: string, boolean, the integers, float,
double, timestamp, date, and `array<…>`, `map<string, …>`, `struct<name: type, …>`;
`NOT NULL` marks a field a record must have. Pure; `json_format` converts records with it,
`spark_types` turns it into Spark's types.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from streaming_jobs.errors import UserError

PRIMITIVES = {
    "string": "string", "varchar": "string", "boolean": "boolean", "bool": "boolean",
    "tinyint": "byte", "byte": "byte", "smallint": "short", "short": "short",
    "int": "int", "integer": "int", "bigint": "long", "long": "long",
    "float": "float", "real": "float", "double": "double", "timestamp": "timestamp",
    "date": "date", "binary": "binary",
}
"""DDL spellings → the canonical name used here."""


class DdlError(UserError):
    """The schema string is not one this parser accepts; the message says where."""


@dataclass(frozen=True)
class Type:
    """`kind` is a canonical primitive, or array / map / struct with their parts."""

    kind: str
    element: Type | None = None
    """array: the element type; map: the value type (keys are strings)."""
    fields: tuple[Field, ...] = ()
    """struct: its fields."""

    def describe(self) -> str:
        if self.kind == "array":
            assert self.element is not None
            return f"array<{self.element.describe()}>"
        if self.kind == "map":
            assert self.element is not None
            return f"map<string, {self.element.describe()}>"
        if self.kind == "struct":
            return "struct<" + ", ".join(f"{f.name}: {f.type.describe()}"
                                         for f in self.fields) + ">"
        return self.kind


@dataclass(frozen=True)
class Field:
    name: str
    type: Type
    required: bool = False
    """Declared NOT NULL: a record without it (or with null) does not decode."""


_T = TypeVar("_T")

_TOKEN = re.compile(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*|<|>|,|:|\(|\))")


def parse(ddl: str) -> tuple[Field, ...]:
    """The top-level fields of `ddl`; `DdlError` naming the problem and its position."""
    parser = _Parser(ddl)
    fields = parser.fields(top_level=True)
    if not fields:
        raise DdlError("the schema declares no fields")
    names = [f.name for f in fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DdlError(f"field {duplicates[0]!r} is declared more than once")
    return fields


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens: list[tuple[str, int]] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                if text[position:].strip() == "":
                    break
                raise DdlError(f"unexpected character {text[position:].strip()[0]!r} at "
                               f"position {position} of {text!r}")
            self._tokens.append((match.group(1), match.start(1)))
            position = match.end()
        self._at = 0

    def fields(self, top_level: bool) -> tuple[Field, ...]:
        fields = []
        while self._peek() not in (None, ">"):
            fields.append(self._field(top_level))
            if self._peek() == ",":
                self._next()
            elif self._peek() not in (None, ">"):
                raise self._error("expected ',' between fields")
        if top_level and self._peek() is not None:
            raise self._error("unexpected '>'")
        return tuple(fields)

    def _field(self, top_level: bool) -> Field:
        name = self._next()
        if name is None or not re.fullmatch(r"`[^`]+`|[A-Za-z_][A-Za-z0-9_]*", name):
            raise self._error("expected a field name", back=1)
        if not top_level and self._peek() == ":":
            self._next()
        field_type = self._type()
        required = False
        if (self._peek() or "").lower() == "not":
            self._next()
            if (self._next() or "").lower() != "null":
                raise self._error("expected NOT NULL")
            required = True
        return Field(name.strip("`"), field_type, required)

    def _type(self) -> Type:
        word = (self._next() or "").lower()
        if word in PRIMITIVES:
            return Type(PRIMITIVES[word])
        if word == "array":
            return Type("array", element=self._in_angles(self._type))
        if word == "map":
            return Type("map", element=self._in_angles(self._map_value))
        if word == "struct":
            return Type("struct", fields=self._in_angles(lambda: self.fields(top_level=False)))
        raise self._error(f"unknown type {word!r}; known: {', '.join(sorted(PRIMITIVES))}, "
                          "array<…>, map<string, …>, struct<…>", back=1)

    def _in_angles(self, parse: Callable[[], _T]) -> _T:
        """What `parse` reads between a complex type's `<` and `>`."""
        self._expect("<")
        inside = parse()
        self._expect(">")
        return inside

    def _map_value(self) -> Type:
        """The value type of `string, value`: a map's keys are a JSON object's, so strings."""
        key = self._type()
        if key.kind != "string":
            raise self._error("map keys must be strings (JSON object keys are)")
        self._expect(",")
        return self._type()

    def _peek(self) -> str | None:
        return self._tokens[self._at][0] if self._at < len(self._tokens) else None

    def _next(self) -> str | None:
        token = self._peek()
        self._at += token is not None
        return token

    def _expect(self, token: str) -> None:
        if self._next() != token:
            raise self._error(f"expected {token!r}", back=1)

    def _error(self, what: str, back: int = 0) -> DdlError:
        at = self._at - back
        where = (f"position {self._tokens[at][1]}" if 0 <= at < len(self._tokens)
                 else "the end")
        return DdlError(f"{what} at {where} of {self._text!r}")
