"""Real English sentences that ship with Python itself (the help topics of ``pydoc_data``).

Example:
    >>> len(sentences(500))
    500
"""

from __future__ import annotations

import re

from trtforge.core.errors import InvalidArgument


def sentences(count: int | None = None, offset: int = 0) -> list[str]:
    """Deterministic plain sentences (30–200 characters) from Python's help topics."""
    from pydoc_data.topics import topics

    found: list[str] = []
    for key in sorted(topics):
        text = " ".join(topics[key].split())
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if 30 <= len(sentence) <= 200 and sentence[0].isupper() and not any(c in sentence for c in "*`|>=[]{}"):
                found.append(sentence)
    chosen = found[offset:]
    if count is not None:
        if len(chosen) < count:
            raise InvalidArgument(
                f"only {len(chosen)} sentences available after offset {offset}, asked for {count}; "
                "ask for fewer, or a smaller offset"
            )
        chosen = chosen[:count]
    return chosen
