"""Strict JSON (docs/contract.md §3 limits): what the record accepts is what every read path serves.

Pure (no Django). `loads` reads a request body or a file; `check` applies the same rules
to a Python value that arrived another way (admin, importers). Both raise `StrictJSONError`
naming the JSON path of the first offence (`metadata.a.b`, `blocks[0].input.x`).

The rules, and why:
- nesting at most `MAX_DEPTH` containers, counted from the root (the root is level 1):
  orjson refuses to serialise past ~255 levels, and a stored value must stay servable
  when the API, the pages and the sockets wrap it in a few more levels;
- no duplicate key in an object: the second would silently replace the first;
- integers within a signed 64-bit range: orjson serialises no larger integer, and
  SQLite's JSON integers are 64-bit; a larger one is refused, never rounded to a float;
- a float only when the shortest text of the double it parses to is numerically the
  number sent (`0.1` is kept, `0.10000000000000000001` would be rounded and is refused)
  and its magnitude is below 2**63 (PostgreSQL's jsonb prints `1e+20` back as an
  integer, which must stay within the integer range); no NaN or Infinity;
- text is valid Unicode without lone surrogates (`"\\ud800"`), which neither orjson nor
  PostgreSQL can hold.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from conversations.core.blocks import JSONValue

MAX_DEPTH = 64
MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
MAX_FLOAT = 2.0**63
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_PATH_PARTS = 8  # a path longer than this is shown by its start and an ellipsis


class StrictJSONError(ValueError):
    """A value the record refuses; `path` names where (`""` is the root), `reason` why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        self.field = path or "body"
        super().__init__(f"{self.field}: {reason}")


def loads(raw: bytes | str, *, root: str = "") -> JSONValue:
    """Parse one JSON document under the module's rules; `root` prefixes every error path.

    Small documents pay one C parse plus a few hook calls; a full walk runs only when the
    document could break a rule the parse cannot see on its own (depth, lone surrogates).
    """
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(root, f"is not valid UTF-8 (byte {exc.start})") from None
    refused: list[_Refused] = []
    decoder = json.JSONDecoder(
        object_pairs_hook=lambda pairs: _object(pairs, refused),
        parse_int=lambda digits: _int(digits, refused),
        parse_float=lambda digits: _float(digits, refused),
        parse_constant=lambda name: _refuse(refused, f"{name} is not a JSON number"),
    )
    try:
        value = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(
            root, f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        # Far deeper than MAX_DEPTH: the parser gave up before any value was built.
        path = _deep_path(text, root)
        raise StrictJSONError(path, f"nests deeper than {MAX_DEPTH} levels") from None
    if text.count("{") + text.count("[") > MAX_DEPTH and _too_deep(text):
        path = _deep_path(text, root)
        raise StrictJSONError(path, f"nests deeper than {MAX_DEPTH} levels")
    surrogates = _SURROGATE_ESCAPE.search(text) is not None or not isinstance(raw, bytes)
    if refused or surrogates:  # walk only to name the offence's path, or to find surrogates
        check(value, root=root, strings=surrogates)
    return value  # type: ignore[no-any-return]


def check(value: Any, *, root: str = "", strings: bool = True) -> None:
    """Raise StrictJSONError unless `value` is JSON the record can store and serve exactly.

    Walks iteratively (any depth is safe); `strings=False` skips the Unicode check for
    values whose text is already known to be valid.
    """
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (), 1)]
    while stack:
        item, parts, depth = stack.pop()
        if isinstance(item, _Refused):
            raise StrictJSONError(_path(root, parts + item.parts), item.reason)
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise StrictJSONError(_path(root, parts), f"nests deeper than {MAX_DEPTH} levels")
            children: list[tuple[Any, tuple[str | int, ...], int]] = []
            for key, child in item.items():
                if not isinstance(key, str):
                    reason = f"has a key that is not text: {key!r:.40}"
                    raise StrictJSONError(_path(root, parts), reason)
                if strings:
                    _check_text(key, root, parts + (key,))
                children.append((child, parts + (key,), depth + 1))
            stack.extend(reversed(children))  # first key first, as in the document
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise StrictJSONError(_path(root, parts), f"nests deeper than {MAX_DEPTH} levels")
            for index in range(len(item) - 1, -1, -1):  # first item first
                stack.append((item[index], parts + (index,), depth + 1))
        elif isinstance(item, str):
            if strings:
                _check_text(item, root, parts)
        elif isinstance(item, bool) or item is None:
            pass
        elif isinstance(item, int):
            if not MIN_INT <= item <= MAX_INT:
                bits = item.bit_length()
                digits = str(item) if bits < 1000 else f"a {bits}-bit integer"
                raise StrictJSONError(_path(root, parts), _int_reason(digits))
        elif isinstance(item, float):
            if item != item or abs(item) >= MAX_FLOAT:  # NaN, ±Infinity, or too large
                raise StrictJSONError(_path(root, parts), _float_reason(repr(item)))
        else:
            raise StrictJSONError(
                _path(root, parts), f"is a {type(item).__name__}, which JSON cannot hold"
            )


class _Refused:
    """Stands in the parsed value for an offence; `check` reports it with its path."""

    __slots__ = ("parts", "reason")

    def __init__(self, reason: str, parts: tuple[str | int, ...] = ()) -> None:
        self.reason = reason
        self.parts = parts


def _refuse(refused: list[_Refused], reason: str, parts: tuple[str, ...] = ()) -> _Refused:
    marker = _Refused(reason, parts)
    refused.append(marker)
    return marker


def _object(pairs: list[tuple[str, Any]], refused: list[_Refused]) -> dict[str, Any] | _Refused:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            return _refuse(refused, "is a duplicate key in its object", (key,))
        seen.add(key)
    raise AssertionError("a shorter dict has a repeated key")  # pragma: no cover


def _int(digits: str, refused: list[_Refused]) -> int | _Refused:
    if len(digits) <= 18:  # always within 64 bits: the common case, no big-int work
        return int(digits)
    if len(digits) <= 20:  # 19 digits and a sign at most; longer text is never parsed
        number = int(digits)
        if MIN_INT <= number <= MAX_INT:
            return number
    return _refuse(refused, _int_reason(digits))


def _float(digits: str, refused: list[_Refused]) -> float | _Refused:
    number = float(digits)
    if abs(number) < MAX_FLOAT and (
        repr(number) == digits or Decimal(repr(number)) == Decimal(digits)
    ):
        return number
    return _refuse(refused, _float_reason(digits))


def _int_reason(digits: str) -> str:
    shown = digits if len(digits) <= 40 else f"{digits[:20]}…({len(digits)} digits)"
    return (
        f"{shown} is outside the 64-bit integer range that every read path serves exactly; "
        "send it as a string"
    )


def _float_reason(digits: str) -> str:
    shown = digits if len(digits) <= 40 else f"{digits[:20]}…({len(digits)} characters)"
    number = float(digits)
    if number != number or number in (float("inf"), float("-inf")):
        why = "is not a finite number"
    elif abs(number) >= MAX_FLOAT:
        why = "is not below 2**63 in magnitude, the range every read path serves exactly"
    else:
        why = f"would be rounded to {number!r} as a 64-bit float"
    return f"{shown} {why}; send it as a string"


def _check_text(text: str, root: str, parts: tuple[str | int, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError(
            _path(root, parts), "contains a lone UTF-16 surrogate (\\ud800–\\udfff)"
        ) from None


def _path(root: str, parts: tuple[str | int, ...]) -> str:
    """`root.key[0].other`; keys that are not identifiers are quoted; long paths shortened."""
    shown = parts if len(parts) <= _PATH_PARTS else parts[:_PATH_PARTS]
    path = root
    for part in shown:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _KEY.fullmatch(part):
            path += f".{part}" if path else part
        else:
            quoted = json.dumps(part[:40] + ("…" if len(part) > 40 else ""), ensure_ascii=True)
            path += f"[{quoted}]"
    if len(parts) > _PATH_PARTS:
        path += "…"
    return path


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def _too_deep(text: str) -> bool:
    """Whether valid JSON `text` nests deeper than MAX_DEPTH, at C speed: strip strings and
    scalars, then peel innermost bracket pairs; what survives MAX_DEPTH peels is deeper."""
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(MAX_DEPTH):
        skeleton = _EMPTY_PAIR.sub("", skeleton)
        if not skeleton:
            return False
    return True


def _deep_path(text: str, root: str) -> str:
    """The path of the first container past MAX_DEPTH, found without building values."""
    frames: list[list[Any]] = []  # [kind, key or index, expecting a key]
    for match in _TOKEN.finditer(text):
        token = match.group()
        frame = frames[-1] if frames else None
        if token in "{[":
            if len(frames) == MAX_DEPTH:
                parts = tuple(part for _kind, part, _expect in frames if part is not None)
                return _path(root, parts)
            frames.append(["{", None, True] if token == "{" else ["[", 0, False])
        elif token in "}]":
            if frames:
                frames.pop()
        elif frame is None:
            continue
        elif token == ",":
            if frame[0] == "[":
                frame[1] += 1
            else:
                frame[2] = True
        elif token == ":":
            frame[2] = False
        elif frame[0] == "{" and frame[2]:
            frame[1] = json.loads(token)
    return root
