"""The factories' argument checks: a count or a seed is a whole number, never a float cut
down silently (``image_folder(n_experiences=2.7)`` gave 2 experiences)."""

from typing import Any, Optional

__all__ = ["whole_number"]


def whole_number(value: Any, name: str, minimum: Optional[int] = None) -> int:
    """``value`` as an int when it is one (an int, an integral float, or the digits of one);
    a ``ValueError`` naming ``name`` otherwise, or below ``minimum``."""
    number: Optional[int] = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is None:
        raise ValueError(f"{name}={value!r}: give a whole number (e.g. {name}=2).")
    if minimum is not None and number < minimum:
        raise ValueError(f"{name}={value!r}: give a whole number of at least {minimum}.")
    return number
