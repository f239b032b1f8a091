"""Keys for tests that look for leaks.

A leak check looks for any five characters of a key in what the product wrote. A key of hex
digits fails that check by chance, since job and rollout ids are hex too; these keys are drawn
from capital letters that are not hex digits, which ids, timestamps and prose never run five of.
"""

from __future__ import annotations

import secrets

_LETTERS = "GHJKLMNPQRSTUVWXYZ"


def random_key(prefix: str = "", length: int = 32) -> str:
    """``prefix`` then ``length`` random capitals none of which is a hex digit."""
    return prefix + "".join(secrets.choice(_LETTERS) for _ in range(length))
