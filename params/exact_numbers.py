"""Numbers as the user wrote them: decimal text <-> exact rationals, and back to JSON.

Guarantee: **a number written in a schema or a CSV is the rational its decimal text denotes**
("15.96" is 1596/100, never the nearest double 15.96000000000000085...), so a value equal to
a declared bound is inside it, and a value on a bin edge falls in the same bin on every
machine. Floats reaching us from a JSON parser are read through their shortest round-trip
representation, which is the decimal the user wrote whenever it had at most 15 significant
digits; schema files are parsed with exact decimals, so longer ones survive too.

>>> exact_number(15.96), parse_decimal(" 1.596E1 ")
(Fraction(399, 25), Fraction(399, 25))
>>> parse_decimal("1/3") is None, parse_decimal("nan") is None
(True, True)
>>> json_number(Fraction(399, 25)), decimal_text(Fraction(-1, 8))
(15.96, '-0.125')
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

__all__ = ["exact_number", "parse_decimal", "json_number", "decimal_text", "decimal_places"]

# Plain or scientific decimal notation only: no "1/3", "1_000", "inf", "nan" or hex, which
# Fraction() or float() would accept but no data owner writes for a measurement.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_RATIONAL = re.compile(r"[+-]?\d+/\d+")
# Exponents beyond this are refused: Fraction("1e999999999") would build a huge integer.
_MAX_EXPONENT = 400


def parse_decimal(text: str) -> Fraction | None:
    """The exact value of decimal text (surrounding spaces ignored), or None if it is not one."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    exponent = text.lower().partition("e")[2]
    if exponent and abs(int(exponent)) > _MAX_EXPONENT:
        return None
    return Fraction(text)


def exact_number(value: object) -> Fraction:
    """A schema number as an exact rational; ValueError if it is not a finite number.

    int, Fraction and Decimal are exact already; a float is read through its shortest repr
    (what the user wrote); a string may hold decimal text or a rational "p/q".
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return Fraction(repr(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        if abs(value.adjusted()) > _MAX_EXPONENT:
            raise ValueError(f"{value} is out of range")
        return Fraction(value)
    if isinstance(value, str):
        parsed = parse_decimal(value)
        if parsed is None and _RATIONAL.fullmatch(value.strip()):
            numerator, denominator = value.strip().split("/")
            if int(denominator) != 0:
                parsed = Fraction(int(numerator), int(denominator))
        if parsed is None:
            raise ValueError(f"{value!r} is not a decimal number")
        return parsed
    raise ValueError(f"{value!r} is not a number")


def decimal_places(value: Fraction) -> int | None:
    """Digits after the point needed to write ``value`` exactly; None if no finite decimal."""
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    return max(twos, fives) if denominator == 1 else None


def decimal_text(value: Fraction, places: int | None = None) -> str:
    """Exact decimal text of ``value`` (trailing zeros dropped); with ``places``, the value
    must be a multiple of 10^-places. A rational without a finite decimal is written p/q."""
    if places is None:
        places = decimal_places(value)
        if places is None:
            return f"{value.numerator}/{value.denominator}"
    scaled = value * 10 ** places
    if scaled.denominator != 1:
        raise ValueError(f"{value} is not a multiple of 10^-{places}")
    return scaled_text(scaled.numerator, places)


def scaled_text(scaled: int, places: int) -> str:
    """``scaled / 10^places`` as decimal text, trailing zeros dropped ("1250", 3 -> "1.25")."""
    sign = "-" if scaled < 0 else ""
    digits = str(abs(scaled)).rjust(places + 1, "0")
    whole, fraction = digits[:len(digits) - places], digits[len(digits) - places:]
    fraction = fraction.rstrip("0")
    return f"{sign}{whole}.{fraction}" if fraction else f"{sign}{whole}"


def json_number(value: Fraction) -> int | float | str:
    """The JSON form that reads back as exactly ``value``: an int, a float whose shortest
    repr is the exact decimal, or else the exact text as a string."""
    if value.denominator == 1:
        return value.numerator
    as_float = float(value)
    if math.isfinite(as_float) and Fraction(repr(as_float)) == value:
        return as_float
    return decimal_text(value)
