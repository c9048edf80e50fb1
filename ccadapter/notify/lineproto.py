"""InfluxDB line protocol, the encoding side only. Pure.

``measurement,tag=v,... field="string" <ns timestamp>``. What must be escaped differs by
element: measurement names escape commas and spaces, tag keys and values also equals signs,
string field values double quotes and backslashes. The protocol has no way to carry a
newline in any element, so a newline is refused (:class:`LineProtocolError`) rather than
written into a line that a consumer would split in two. The JSON we put into string fields
never holds a raw newline: ``json.dumps`` writes it as ``\\n``.
"""

from __future__ import annotations

from collections.abc import Mapping


class LineProtocolError(ValueError):
    """A value that line protocol cannot represent."""


def _check(element: str, value: str, *, backslash_ok: bool) -> None:
    if "\n" in value or "\r" in value:
        raise LineProtocolError(f"{element} {value!r}: line protocol cannot carry a newline")
    if not backslash_ok and "\\" in value:
        # A backslash before a special character would read as an escape; Influx's own
        # parsers disagree on the rest. Hostnames and partitions never hold one.
        raise LineProtocolError(f"{element} {value!r}: backslashes are not supported here")
    if value == "":
        raise LineProtocolError(f"{element} must not be empty")


def escape_measurement(name: str) -> str:
    _check("measurement", name, backslash_ok=False)
    return name.replace(",", "\\,").replace(" ", "\\ ")


def escape_tag(text: str, element: str = "tag") -> str:
    _check(element, text, backslash_ok=False)
    return text.replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def escape_string_field(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise LineProtocolError("string field: line protocol cannot carry a newline")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def encode_line(measurement: str, tags: Mapping[str, str], fields: Mapping[str, str],
                timestamp_ns: int) -> str:
    """One line (no trailing newline). Tags are sorted by key, as Influx recommends; string
    fields only, because that is all a job event needs."""
    if not fields:
        raise LineProtocolError("a line needs at least one field")
    head = escape_measurement(measurement)
    for key in sorted(tags):
        head += f",{escape_tag(key, 'tag key')}={escape_tag(tags[key], f'tag {key}')}"
    body = ",".join(f"{escape_tag(k, 'field key')}={escape_string_field(v)}"
                    for k, v in fields.items())
    return f"{head} {body} {int(timestamp_ns)}"
