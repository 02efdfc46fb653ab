"""Paired ratios for benchmarks whose absolute rates drift with the machine.

Each round times the raw client and ackbridge back to back, so a round's ratio
compares two runs made under the same conditions. The median of the per-round
ratios is the figure reported; the lowest and highest round show the spread.
"""

from __future__ import annotations

import statistics


def paired_line(label: str, raw_name: str, raw: list[float], ab: list[float], note: str = "") -> str:
    """One printed line: median rates, the spread of per-round ratios, then the
    median ratio last (benchmarks/report.py plots the last figure of a ratio line)."""
    ratios = [a / r for r, a in zip(raw, ab, strict=True)]
    median = statistics.median(ratios)
    line = (f"{label:<17}{raw_name} {statistics.median(raw):>9.0f}   ackbridge {statistics.median(ab):>9.0f}   "
            f"rounds {min(ratios):.2f}..{max(ratios):.2f}   median ratio {median:.2f}")
    return f"{line}   {note}" if note else line
