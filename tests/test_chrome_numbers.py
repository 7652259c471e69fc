"""Exact microsecond -> nanosecond parsing (chrome_numbers, chrome_columns.to_ns)."""

from decimal import ROUND_HALF_UP, Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import Raw

from acceltrace.ingest.chrome.columns import to_ns
from acceltrace.ingest.chrome.numbers import parse_decimal


def exact_ns(text: str) -> int:
    return int((Decimal(text) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


decimal_text = st.builds(
    lambda sign, whole, frac: f"{sign}{whole}" + (f".{frac}" if frac else ""),
    st.sampled_from(["", "-"]), st.integers(0, 10**15), st.one_of(st.just(""), st.from_regex(r"[0-9]{1,6}", fullmatch=True)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(decimal_text, min_size=1, max_size=50))
def test_any_plain_decimal_parses_exactly(texts):
    p = parse_decimal([t.encode() for t in texts], 3)
    assert p.ok.all()
    assert p.values.tolist() == [exact_ns(t) for t in texts]


def test_strings_exponents_null_and_garbage():
    p = parse_decimal([b'"12.5"', b"1.5e3", b"null", b"", b'"abc"', b"1-2", b"99999999999999999999"], 3)
    assert p.values[:2].tolist() == [12500, 1500000]
    assert p.ok.tolist() == [True, True, False, False, False, False, False]
    assert p.missing.tolist() == [False, False, True, True, False, False, False]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**42 * 1000 - 1), min_size=1, max_size=50))
def test_float_times_below_2_pow_42_us_keep_three_decimals(ns_values):
    # what msgspec hands over for "1419116963736.702": the nearest double
    floats = [float(f"{v // 1000}.{v % 1000:03d}") for v in ns_values]
    p = to_ns(floats, exact_fallback=lambda: None)
    assert p.values.tolist() == ns_values


def test_large_float_times_use_the_written_digits():
    raws = [Raw(b"1700000000000000.123"), Raw(b"1700000000000000.124")]
    p = to_ns([1700000000000000.123, 1700000000000000.124], exact_fallback=lambda: raws)
    assert p.values.tolist() == [1700000000000000123, 1700000000000000124]
