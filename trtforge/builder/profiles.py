"""Batch specs → TensorRT optimization profiles (min/opt/max shape per input).

The batch specs themselves (``1``, ``(1, 8, 32)``, ``"1:8:32"``) are parsed in ``trtforge.core.batch``.

Example:
    >>> resolve_profiles(inputs, parse_batch(8))[0]["images"]
    {'min': [8, 3, 224, 224], 'opt': [8, 3, 224, 224], 'max': [8, 3, 224, 224]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtforge.core.batch import BatchProfile, BatchSpecError
from trtforge.core.specs import TensorSpec

Shapes = Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[int]]]


def resolve_profiles(
    inputs: Sequence[TensorSpec], batches: Sequence[BatchProfile], shapes: Shapes | None = None
) -> tuple[dict[str, dict[str, list[int]]], ...]:
    """Per profile, per input: min/opt/max shapes. Dim 0 follows the batch profile.

    Other dynamic dims need ``shapes={name: (min, opt, max)}``; those override the batch rule.
    """
    shapes = dict(shapes or {})
    unknown = set(shapes) - {s.name for s in inputs}
    if unknown:
        raise BatchSpecError(f"shapes= names unknown inputs {sorted(unknown)}; inputs are {[s.name for s in inputs]}")
    result = []
    for batch in batches:
        profile: dict[str, dict[str, list[int]]] = {}
        for spec in inputs:
            if spec.name in shapes:
                lo, mid, hi = (list(map(int, s)) for s in shapes[spec.name])
                profile[spec.name] = {"min": lo, "opt": mid, "max": hi}
                continue
            if not spec.shape:
                profile[spec.name] = {"min": [], "opt": [], "max": []}
                continue
            rest = list(spec.shape[1:])
            if any(d < 0 for d in rest):
                raise BatchSpecError(
                    f"input {spec.name!r} has dynamic dims beyond the batch: {list(spec.shape)}; "
                    f"give them with shapes={{'{spec.name}': (min_shape, opt_shape, max_shape)}}"
                )
            if spec.shape[0] >= 0 and not (batch.static and batch.opt == spec.shape[0]):
                raise BatchSpecError(
                    f"input {spec.name!r} has a fixed batch {spec.shape[0]} but batch={batch} was asked; "
                    "export the model with a dynamic batch (dynamic_batch=True) or ask for that batch"
                )
            profile[spec.name] = {
                "min": [batch.min, *rest], "opt": [batch.opt, *rest], "max": [batch.max, *rest],
            }
        result.append(profile)
    return tuple(result)
