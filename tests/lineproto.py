"""A strict InfluxDB line-protocol reader for the tests: the independent reading of what
ccadapter writes (it shares no code with ccadapter.notify.lineproto)."""

from __future__ import annotations

from dataclasses import dataclass


class ParseError(ValueError):
    pass


@dataclass(frozen=True)
class Point:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, str | float | int | bool]
    timestamp: int


def _plain(text: str, i: int, stops: str, escapable: str) -> tuple[str, int]:
    """Read up to an unescaped character of ``stops``; ``\\x`` for x in ``escapable``."""
    out = []
    while i < len(text) and text[i] not in stops:
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in escapable:
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out), i


def _quoted(text: str, i: int) -> tuple[str, int]:
    if text[i] != '"':
        raise ParseError(f"expected '\"' at {i}")
    i += 1
    out = []
    while True:
        if i >= len(text):
            raise ParseError("unterminated string field")
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        elif c == "\\":
            raise ParseError(f"lone backslash at {i}")
        else:
            out.append(c)
            i += 1


def _field_value(text: str, i: int) -> tuple[str | float | int | bool, int]:
    if text[i] == '"':
        return _quoted(text, i)
    raw, i = _plain(text, i, ", ", "")
    if raw.endswith("i") and raw[:-1].lstrip("-").isdigit():
        return int(raw[:-1]), i
    if raw in ("t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"):
        return raw[0] in "tT", i
    try:
        return float(raw), i
    except ValueError:
        raise ParseError(f"bad field value {raw!r}") from None


def parse_line(line: str) -> Point:
    if "\n" in line or "\r" in line:
        raise ParseError("a point is one line")
    measurement, i = _plain(line, 0, ", ", ", ")
    if not measurement:
        raise ParseError("empty measurement")
    tags: dict[str, str] = {}
    while i < len(line) and line[i] == ",":
        key, i = _plain(line, i + 1, "=, ", ",= ")
        if i >= len(line) or line[i] != "=" or not key:
            raise ParseError(f"bad tag at {i}")
        value, i = _plain(line, i + 1, ", ", ",= ")
        if not value or key in tags:
            raise ParseError(f"empty or repeated tag {key!r}")
        tags[key] = value
    if i >= len(line) or line[i] != " ":
        raise ParseError("no field set")
    fields: dict[str, str | float | int | bool] = {}
    i += 1
    while True:
        key, i = _plain(line, i, "=", ",= ")
        if i >= len(line) or not key:
            raise ParseError(f"bad field at {i}")
        fields[key], i = _field_value(line, i + 1)
        if i < len(line) and line[i] == ",":
            i += 1
            continue
        break
    if i >= len(line) or line[i] != " ":
        raise ParseError("no timestamp")
    stamp = line[i + 1:]
    if not stamp.lstrip("-").isdigit():
        raise ParseError(f"bad timestamp {stamp!r}")
    return Point(measurement, tags, fields, int(stamp))
