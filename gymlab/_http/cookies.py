"""The one cookie codec: every server path, the worker router and every agent read and write cookies here
(``Cookie`` as RFC 6265 section 4.2 reads it, ``Set-Cookie`` as the standard library does; docs/transport.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from http.cookies import CookieError, SimpleCookie

#: A ``Set-Cookie`` pair that needs no unquoting: what every session cookie of a gymlab server looks like.
_PLAIN_PAIR = re.compile(r"\s*([A-Za-z0-9_.\-]+)=([A-Za-z0-9_.\-=+/:]*)\s*")
#: Bytes of one ``Set-Cookie`` value read (RFC 6265 section 6.1's 4096, a browser's limit): a longer one is
#: dropped unread, as a browser drops it; the standard library's parser is quadratic on long quoted values.
MAX_SET_COOKIE = 4096
#: Bytes of ``Set-Cookie`` values read from one answer (two of the longest): the rest are dropped unread.
MAX_SET_COOKIES = 2 * MAX_SET_COOKIE
_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "secure", "httponly", "samesite", "comment", "version", "partitioned"}
)


def request_cookie(header: str, name: str) -> str | None:
    """The value of cookie ``name`` in a request's ``Cookie`` header (the first, unquoted), or None."""
    return request_cookies(header).get(name)


def scope_cookie(headers: Iterable[tuple[bytes, bytes]], name: str) -> str | None:
    """The value of cookie ``name`` in an ASGI request's headers: the first ``Cookie`` header naming it."""
    for key, raw in headers:
        if key == b"cookie":
            value = request_cookie(raw.decode("latin-1"), name)
            if value is not None:
                return value
    return None


def request_cookies(header: str | None) -> dict[str, str]:
    """Every cookie in a request's ``Cookie`` header, name -> value (the first of a repeated name)."""
    cookies: dict[str, str] = {}
    for part in (header or "").split(";"):
        key, eq, value = part.partition("=")
        key = key.strip()
        if eq and key and key not in cookies:
            value = value.strip()
            cookies[key] = value[1:-1] if len(value) > 1 and value[0] == '"' and value[-1] == '"' else value
    return cookies


def cookie_header(cookies: Mapping[str, str]) -> str | None:
    """A request's ``Cookie`` header for ``cookies`` (None when there are none)."""
    return "; ".join(f"{k}={v}" for k, v in cookies.items()) if cookies else None


def answer_cookie_pairs(values: Iterable[bytes | str]) -> list[tuple[str, str]]:
    """The pairs an answer's ``Set-Cookie`` values set, in order, within ``MAX_SET_COOKIES`` bytes in all."""
    pairs: list[tuple[str, str]] = []
    budget = MAX_SET_COOKIES
    for raw in values:
        budget -= len(raw)
        if budget < 0:
            break
        pairs += set_cookie_pairs(raw if isinstance(raw, str) else raw.decode("latin-1"))
    return pairs


def set_cookie_pairs(value: str) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs a ``Set-Cookie`` value sets (attributes dropped, values unquoted); none
    for a value over ``MAX_SET_COOKIE`` bytes."""
    if len(value) > MAX_SET_COOKIE:
        return []
    pair = _plain_pair(value)
    if pair is not None:
        return [pair]
    try:
        parsed = SimpleCookie(value)
    except CookieError:
        return []
    return [(key, morsel.value) for key, morsel in parsed.items()]


def _plain_pair(value: str) -> tuple[str, str] | None:
    """The pair of a ``Set-Cookie`` value made of one plain pair and known attributes, read as
    ``SimpleCookie`` reads it, without its general parser (several times slower); None for anything else."""
    first, *attributes = value.split(";")
    pair = _PLAIN_PAIR.fullmatch(first)
    if pair is None or pair[1].lower() in _ATTRIBUTES:
        return None
    for attribute in attributes:
        if attribute.partition("=")[0].strip().lower() not in _ATTRIBUTES:
            return None
    return pair[1], pair[2]


def set_cookie_attributes(path: str, max_age: int | None, flags: str) -> str:
    """The attributes after a server's session cookie pair: ``; path=...; Max-Age=...; <flags>``."""
    return f"; path={path}; " + (f"Max-Age={max_age}; " if max_age is not None else "") + flags


def set_cookie(name: str, value: str, attributes: str) -> bytes:
    """A ``Set-Cookie`` value (``attributes`` from ``set_cookie_attributes``)."""
    return f"{name}={value}{attributes}".encode("latin-1")


def expired_cookie(name: str, path: str, flags: str) -> bytes:
    """A ``Set-Cookie`` value that makes the client drop cookie ``name``."""
    return f"{name}=null; path={path}; expires=Thu, 01 Jan 1970 00:00:00 GMT; {flags}".encode("latin-1")
