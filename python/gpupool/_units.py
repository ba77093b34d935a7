"""Memory sizes and durations written as `gpupool` accepts them on its command line."""
import math
import re

from ._connection import Error

_MIB = {"": 1, "M": 1, "MB": 1, "MIB": 1, "G": 1024, "GB": 1024, "GIB": 1024,
        "T": 1 << 20, "TB": 1 << 20, "TIB": 1 << 20}
_SECONDS = {"": 1, "s": 1, "ms": 0.001, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NUMBER = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(.*)")


def memory_mib(value):
    """MiB per GPU from an int (MiB) or text like "20G", "512M"; None stays None (whole GPUs)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise Error(f"invalid memory size {value!r}: expected e.g. 20G, 512M or a number of MiB")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        match = _NUMBER.fullmatch(str(value))
        if not match:
            raise Error(f"invalid memory size '{value}': expected e.g. 20G, 512M or a number of MiB")
        number, unit = float(match.group(1)), match.group(2).upper()
    if unit not in _MIB:
        raise Error(f"invalid memory size '{value}': unknown unit '{unit}' (use M, G or T)")
    mib = number * _MIB[unit]
    if not math.isfinite(mib) or mib < 1 or mib > 1e12:
        raise Error(f"invalid memory size '{value}': out of range")
    return math.ceil(mib)


def seconds(value, what):
    """Seconds from a number or text like "30m", "2h"; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise Error(f"invalid {what} {value!r}: expected seconds or e.g. 30s, 10m, 2h")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        match = _NUMBER.fullmatch(str(value))
        if not match:
            raise Error(f"invalid {what} '{value}': expected e.g. 30s, 10m or 2h")
        number, unit = float(match.group(1)), match.group(2)
    if unit not in _SECONDS:
        raise Error(f"invalid {what} '{value}': unknown unit '{unit}' (use ms, s, m, h, d or w)")
    result = number * _SECONDS[unit]
    if not math.isfinite(result) or result < 0:
        raise Error(f"invalid {what} '{value}': must be a finite number of seconds, at least 0")
    return result
