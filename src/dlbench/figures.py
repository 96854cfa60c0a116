"""How figures are written: rounded to significant digits, never a nonzero value shown as 0.

Every report table, the one-line results and `doctor` format numbers through these, so the
same quantity reads the same everywhere: times of a step or a phase in milliseconds, whole
jobs in the unit their column names (s, min, h, d).
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation


DASH = "-"
ODD = "?"  # a stored value that is no valid figure (report tables explain it in a legend)
ODD_LEGEND = ("? marks a stored value that is not a valid figure (not a number, infinite, negative or "
              "absurdly large); the record keeps it as stored")
LARGEST = 1e18  # no figure a report shows is larger; beyond it a value is a forgery or a typo


class Odd(float):
    """A stored value that is no valid figure, as reports receive it (results.record.tamed): a
    NaN, so any arithmetic on it goes on without raising, marked so that it prints as `?`."""

    def __new__(cls) -> "Odd":
        return super().__new__(cls, "nan")

    def __repr__(self) -> str:
        return "Odd()"


def odd(value: object) -> bool:
    """Whether `value`, given where a figure belongs, cannot be shown as one: marked odd, not a
    number, infinite or beyond LARGEST. (None and a plain NaN are missing values: a dash.)"""
    if isinstance(value, Odd):
        return True
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if not isinstance(value, (int, float, Decimal)) or isinstance(value, bool):
        return True
    return not math.isfinite(value) or abs(value) > LARGEST


def sig(value: float | None, digits: int = 3, *, grouping: bool = False) -> str:
    """`digits` significant digits, but never fewer than the integer part has:
    0.012345 -> '0.0123', 5.2631 -> '5.26', 52.63 -> '52.6', 1234.5 -> '1235'."""
    if odd(value):
        return ODD
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}" if grouping else f"{value:.{decimals}f}"
    if float(text.replace(",", "")) == 0:  # rounding reached 0 at the edge of a decade
        return sig(value, digits + 1, grouping=grouping)
    return text


def short(value: float | None, digits: int = 3) -> str:
    """Like `sig` without trailing zeros, for sizes in titles: 8.1 -> '8.1', 1.887 -> '1.89'."""
    text = sig(value, digits)
    return text.rstrip("0").rstrip(".") if "." in text else text


def fixed(value: float | None, decimals: int = 2, *, grouping: bool = False) -> str:
    """`decimals` places like the seeds' columns (19.58, 0.1022), with more places where they
    would show fewer than two significant digits of a nonzero value (0.004 -> '0.0040', never
    '0.00'; 0.009 -> '0.0090', not '0.01')."""
    if odd(value):
        return ODD
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if value != 0 and abs(value) < 10.0 ** (1 - decimals):
        return sig(value, 2)
    return f"{value:,.{decimals}f}" if grouping else f"{value:.{decimals}f}"


def ms(value: float | None) -> str:
    """A step or phase time in milliseconds, two places like seed 004."""
    return fixed(value, 2)


def duration(seconds: float | None) -> str:
    """A whole job's time with its unit, in the unit a reader thinks in: '78.0 ms', '4.70 s',
    '12.3 min', '5.2 h'; never '0.078 min'."""
    if odd(seconds):
        return ODD
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return DASH
    if seconds < 1:
        return f"{sig(seconds * 1e3, 3)} ms"
    if seconds < 120:
        return f"{sig(seconds, 3)} s"
    if seconds < 7200:
        return f"{fixed(seconds / 60, 1)} min"
    return f"{fixed(seconds / 3600, 1, grouping=True)} h"


def add(*cells: str) -> str:
    """The sum of figures as they are shown, so a Total column adds up: '5.57' + '9.52' ->
    '15.09', exactly where the parts have the same places (the usual case); otherwise to the
    coarsest part's places ('8.20' + '0.0021' -> '8.20'). A dash anywhere gives a dash, a `?` a `?`."""
    if any(c == ODD for c in cells):
        return ODD
    if any(c in (None, DASH, "") for c in cells):
        return DASH
    try:
        parts = [Decimal(str(c).replace(",", "")) for c in cells]
        total = sum(parts, Decimal(0))
        places = min(-p.as_tuple().exponent for p in parts)
        rounded = total.quantize(Decimal(1).scaleb(-places)) if places > 0 else total.quantize(Decimal(1))
    except (InvalidOperation, TypeError):  # not figures as `ms`/`fixed` print them: nothing to add up
        return ODD
    if rounded == 0 and total != 0:
        return sig(float(total), 2)
    return str(rounded)


def phase_sum(medians: dict[str, float | None], step_ms: float | None) -> str:
    """'data 0.03 + forward 4.80 = 4.83 ms (phase medians; median step 4.81 ms': the shown phases
    (name → median ms) add up to the shown total; the median whole step, which is not that sum,
    stands apart. The caller closes the parenthesis, after anything it adds."""
    values = [ms(value) for value in medians.values()]
    named = " + ".join(f"{p} {v}" for p, v in zip(medians, values))
    return f"{named} = {add(*values)} ms (phase medians; median step {ms(step_ms)} ms"


def percent(share: float | None) -> str:
    """A share as a whole percent, with one significant digit below 1% (0.001 -> '0.1%')."""
    if odd(share):
        return ODD
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return DASH
    text = f"{share:.0%}"
    if share != 0 and text in ("0%", "-0%"):  # 0.005 rounds half to even: '0%'
        return f"{sig(share * 100, 1)}%"
    return text
