"""Byte counts and rates as people read them."""


def human_bytes(count):
    """A byte count in binary units: ``1536`` -> ``'1.5 KiB'``, None -> ``'?'``."""
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024


def human_rate(value, unit):
    """A rate with the digits that matter: ``2345.6`` -> ``'2346 frames/s'``, ``0.1094`` -> ``'0.11 frames/s'``.

    Whole numbers from 10 up, else two significant digits (a short run is not "0 frames/s");
    None (no time measured) -> ``'? frames/s'``.
    """
    if value is None:
        return f"? {unit}"
    if value >= 10:
        return f"{value:.0f} {unit}"
    return f"{float(f'{value:.2g}'):g} {unit}"
