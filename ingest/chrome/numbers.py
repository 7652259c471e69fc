"""Exact decimal parsing of JSON number tokens, vectorised over a whole chunk.

Chrome traces write times in microseconds, often with three decimals for ns
("1419116963736.702"), as integers, floats or strings. A double keeps only about
0.25 us of an epoch-microsecond value, so times are never parsed through a float:
the raw token bytes (msgspec.Raw) are joined into one buffer and every digit is
weighted by its power of ten in numpy, in int64. Tokens the fast path does not
cover (exponents, whitespace inside strings, null, garbage) go through Decimal one
by one; they are rare in real files.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import numpy as np
import pyarrow as pa

_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
_MAX_DIGIT_EXP = 18
_INT64_MAX = (1 << 63) - 1


class Parsed:
    """values (int64), ok (a number was parsed), missing (empty token or null); bad = not ok and not missing."""

    __slots__ = ("values", "ok", "missing")

    def __init__(self, values: np.ndarray, ok: np.ndarray, missing: np.ndarray):
        self.values, self.ok, self.missing = values, ok, missing

    @property
    def bad(self) -> np.ndarray:
        return ~self.ok & ~self.missing


def joined(raws: list) -> tuple[np.ndarray, np.ndarray]:
    """The tokens' bytes as one uint8 array and their start offsets (n + 1 entries)."""
    n = len(raws)
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    return np.frombuffer(b"".join(raws), dtype=np.uint8), offs


def parse_decimal(raws: list, scale: int) -> Parsed:
    """Each token times 10**scale, rounded half away from zero to an integer (scale=3: us -> ns)."""
    a, offs = joined(raws)
    return parse_decimal_buffer(a, offs, scale)


def parse_decimal_buffer(a: np.ndarray, offs: np.ndarray, scale: int) -> Parsed:
    fast = _plain_decimals(a, offs, scale)
    return fast if fast is not None else _general(a, offs, scale)


def _plain_decimals(a: np.ndarray, offs: np.ndarray, scale: int) -> Parsed | None:
    """The common shape only: every token `-?digits[.digits]` with at most 18 digits.

    The dots are cut out of the buffer and Arrow's integer parser reads the digits; the
    count of decimals then gives the power of ten. None when any token is another shape.
    """
    n = len(offs) - 1
    if n == 0 or len(a) == 0:
        return None
    lens = np.diff(offs)
    if (lens == 0).any():
        return None
    is_dot = a == 46
    is_minus = a == 45
    if not (((a >= 48) & (a <= 57)) | is_dot | is_minus).all():
        return None
    minus_at = np.flatnonzero(is_minus)
    if len(minus_at) and not (offs[np.searchsorted(offs, minus_at, side="right") - 1] == minus_at).all():
        return None  # a minus anywhere but first
    dot_at = np.flatnonzero(is_dot)
    dot_tok = np.searchsorted(offs, dot_at, side="right") - 1
    dots = np.bincount(dot_tok, minlength=n)
    if (dots > 1).any():
        return None
    decimals = np.zeros(n, dtype=np.int64)
    decimals[dot_tok] = offs[dot_tok + 1] - dot_at - 1
    digits = lens - dots - (a[offs[:-1]] == 45)
    if (digits < 1).any() or (digits > 18).any():
        return None
    new_offs = offs - np.concatenate(([0], np.cumsum(dots)))
    if new_offs[-1] >= (1 << 31):
        return None
    data = a[~is_dot] if len(dot_at) else a
    arr = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(new_offs.astype(np.int32)), pa.py_buffer(data)])
    try:
        v = arr.cast(pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    shift = scale - decimals
    up = shift >= 0
    if (shift > 18).any():
        return None
    big = np.abs(v[up]) > (_INT64_MAX // _POW10[shift[up]])
    if big.any():
        return None
    out = np.empty(n, dtype=np.int64)
    out[up] = v[up] * _POW10[shift[up]]
    if (~up).any():
        q = _POW10[np.minimum(-shift[~up], 18)]
        mag = (np.abs(v[~up]) + q // 2) // q  # half away from zero
        out[~up] = np.where(v[~up] < 0, -mag, mag)
    return Parsed(out, np.ones(n, dtype=bool), np.zeros(n, dtype=bool))


def _general(a: np.ndarray, offs: np.ndarray, scale: int) -> Parsed:
    n = len(offs) - 1
    lens = np.diff(offs)
    values = np.zeros(n, dtype=np.int64)
    missing = lens == 0
    if n == 0 or len(a) == 0:
        return Parsed(values, np.zeros(n, dtype=bool), missing)
    tok = np.repeat(np.arange(n, dtype=np.int64), lens)
    first = offs[:-1]
    last = offs[1:] - 1
    nonempty = ~missing

    is_digit = (a >= 48) & (a <= 57)
    is_dot = a == 46
    is_minus = a == 45
    is_quote = a == 34
    other = ~(is_digit | is_dot | is_minus | is_quote)
    bad = np.zeros(n, dtype=bool)
    bad[tok[other]] = True

    # quotes only as a matching pair around the whole token
    q_first = np.zeros(n, dtype=bool)
    q_first[nonempty] = is_quote[first[nonempty]]
    q_last = np.zeros(n, dtype=bool)
    q_last[nonempty] = is_quote[last[nonempty]]
    quote_count = np.bincount(tok[is_quote], minlength=n)
    bad |= (quote_count != q_first + q_last) | (q_first != q_last) | (q_first & (lens < 2))
    body_start = first + q_first
    body_end = offs[1:] - q_last  # exclusive

    # one optional leading minus
    minus_idx = np.flatnonzero(is_minus)
    neg = np.zeros(n, dtype=bool)
    if len(minus_idx):
        mt = tok[minus_idx]
        at_start = minus_idx == body_start[mt]
        bad[mt[~at_start]] = True
        neg[mt[at_start]] = True
        bad |= np.bincount(mt, minlength=n) > 1

    # at most one dot; the integer part ends at the dot or at the end of the body
    dot_idx = np.flatnonzero(is_dot)
    int_end = body_end.copy()
    has_dot = np.zeros(n, dtype=bool)
    if len(dot_idx):
        dt = tok[dot_idx]
        bad |= np.bincount(dt, minlength=n) > 1
        int_end[dt] = dot_idx
        has_dot[dt] = True
    digit_count = np.bincount(tok[is_digit], minlength=n)
    bad |= nonempty & (digit_count == 0)

    d_idx = np.flatnonzero(is_digit)
    d_tok = tok[d_idx]
    before = d_idx < int_end[d_tok]
    exp = np.where(before, int_end[d_tok] - d_idx - 1 + scale, scale - (d_idx - int_end[d_tok]))
    digit = (a[d_idx] - 48).astype(np.int64)
    too_big = exp > _MAX_DIGIT_EXP
    bad[d_tok[too_big & (digit > 0)]] = True
    keep = (exp >= 0) & ~too_big
    contrib = np.zeros(len(a), dtype=np.int64)
    contrib[d_idx[keep]] = digit[keep] * _POW10[exp[keep]]
    # the first dropped digit rounds the magnitude half up
    round_up = (exp == -1) & (digit >= 5)
    csum = np.zeros(len(a) + 1, dtype=np.int64)
    np.cumsum(contrib, out=csum[1:])  # wraps on overflow; differences stay exact per token
    mag = csum[offs[1:]] - csum[offs[:-1]]
    mag += np.bincount(d_tok[round_up], minlength=n).astype(np.int64)
    # only a leading 9 at 10**18 can push a magnitude past int64: let Decimal decide those
    bad[d_tok[(exp == _MAX_DIGIT_EXP) & (digit == 9)]] = True
    bad |= mag < 0
    values = np.where(neg, -mag, mag)
    bad &= nonempty
    ok = nonempty & ~bad
    if bad.any():
        _slow_path(a, offs, np.flatnonzero(bad), scale, values, ok, missing)
    values[~ok] = 0
    return Parsed(values, ok, missing)


def _slow_path(a, offs, idx, scale, values, ok, missing) -> None:
    """Tokens the vectorised path refused: exponents, null, padded strings, or real garbage."""
    for i in idx:
        token = a[offs[i]:offs[i + 1]].tobytes()
        v = parse_one(token, scale)
        if v is None:
            if token.strip() == b"null":
                missing[i] = True
            continue
        values[i] = v
        ok[i] = True


def parse_one(token: bytes, scale: int) -> int | None:
    """One token (JSON number or string holding one) times 10**scale, or None if it is not a finite number."""
    text = token.strip()
    if text[:1] == b'"' and text[-1:] == b'"' and len(text) >= 2:
        text = text[1:-1].strip()
    try:
        d = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not d.is_finite() or d.adjusted() > 30:
        return None
    try:
        v = int(d.scaleb(scale).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    except InvalidOperation:
        return None
    if abs(v) > _INT64_MAX:
        return None
    return v


def parse_int(raws: list) -> tuple[np.ndarray, np.ndarray]:
    """Integer ids (correlation, External id, bytes): values and a validity mask.

    A token that is not an integer that fits int64 (a fraction, a string of text,
    a value beyond int64) is simply not valid; it stays verbatim in the args text.
    """
    a, offs = joined(raws)
    p = parse_decimal_buffer(a, offs, 0)
    ok = p.ok.copy()
    if ok.any():
        # exact integers only: 12.5 rounds, so re-check tokens with a fractional part
        frac = _has_fraction(a, offs)
        for i in np.flatnonzero(ok & frac):
            tok = a[offs[i]:offs[i + 1]].tobytes().strip(b'"')
            try:
                d = Decimal(tok.decode("ascii"))
                ok[i] = d == d.to_integral_value()
            except (InvalidOperation, UnicodeDecodeError):
                ok[i] = False
    return p.values, ok


def _has_fraction(a: np.ndarray, offs: np.ndarray) -> np.ndarray:
    n = len(offs) - 1
    lens = np.diff(offs)
    tok = np.repeat(np.arange(n, dtype=np.int64), lens)
    sig = (a == 46) | (a == 101) | (a == 69)  # '.', 'e', 'E'
    return np.bincount(tok[sig], minlength=n) > 0 if len(a) else np.zeros(n, dtype=bool)
