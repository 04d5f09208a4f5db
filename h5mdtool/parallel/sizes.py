"""Byte counts as people read them."""


def human_bytes(count):
    """A byte count in binary units: ``1536`` -> ``'1.5 KiB'``, None -> ``'?'``."""
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
