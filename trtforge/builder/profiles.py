"""Batch specs → TensorRT optimization profiles (min/opt/max shape per input): the batch rule for graphs.

The batch applies to an input's dim 0 only when that input is batched: named in ``batched_inputs=``,
or, by default, with a dynamic dim 0. Every fixed dim is built as it is, so a static model builds
as it is (as trtexec does). ``batch=None`` is the graph's own batch: 1 where dim 0 is dynamic, or,
when the example inputs carry a batch N > 1 there, ``1:N:N`` (``core.batch.resolve_batch``, the one
batch rule of every path): batch 1 and the example's batch both run.
The batch specs themselves (``1``, ``(1, 8, 32)``, ``"1:8:32"``) are parsed in ``trtforge.core.batch``.

Example:
    >>> resolve_profiles(inputs, parse_batch(8))[0]["images"]
    {'min': [8, 3, 224, 224], 'opt': [8, 3, 224, 224], 'max': [8, 3, 224, 224]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtforge.core.batch import DEFAULT_BATCH, BatchProfile, BatchSpecError
from trtforge.core.errors import spelled
from trtforge.core.specs import TensorSpec

Shapes = Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[int]]]


def batched_specs(inputs: Sequence[TensorSpec], batched: Sequence[str] | None, shapes: Shapes) -> set[str]:
    """The names of the inputs the batch applies to (``batched`` when given, else dynamic dim 0s)."""
    names = [s.name for s in inputs]
    if batched is None:
        return {s.name for s in inputs if s.shape and s.shape[0] < 0 and s.name not in shapes}
    unknown = sorted(set(batched) - set(names))
    if unknown:
        raise BatchSpecError(f"batched_inputs names unknown input(s) {unknown}; inputs are {', '.join(names)}")
    for spec in inputs:
        if spec.name in batched and spec.shape and spec.shape[0] >= 0:
            raise BatchSpecError(
                f"input {spec.name!r} is in batched_inputs but its dim 0 is fixed at {spec.shape[0]}; "
                "leave it out of batched_inputs, or export the model with a dynamic dim 0")
    return set(batched)


def shapes_fix(name: str) -> str:
    """The ``shapes`` option for input ``name``, as the reader of this call writes it."""
    return spelled(cli=f"--shapes {name}:MIN:OPT:MAX (each shape its dims joined by x, e.g. 1x3x640x640)",
                   python=f"shapes={{'{name}': (min_shape, opt_shape, max_shape)}}")


def _input_profile(spec: TensorSpec, batch: BatchProfile | None) -> dict[str, list[int]]:
    """One input's min/opt/max: the batch on dim 0 when batched (``batch`` given), fixed dims as they are."""
    rest = list(spec.shape[1:]) if batch is not None else list(spec.shape)
    if any(d < 0 for d in rest):
        if batch is None and spec.shape[0] < 0 and all(d >= 0 for d in spec.shape[1:]):
            raise BatchSpecError(
                f"input {spec.name!r} has a dynamic dim 0 but is not in batched_inputs; add it there, "
                f"or give its shapes with {shapes_fix(spec.name)}")
        raise BatchSpecError(
            f"input {spec.name!r} has dynamic dims beyond the batch: {list(spec.shape)}; "
            f"give them with {shapes_fix(spec.name)}")
    if batch is None:
        return {"min": rest, "opt": list(rest), "max": list(rest)}
    return {"min": [batch.min, *rest], "opt": [batch.opt, *rest], "max": [batch.max, *rest]}


def check_fixed_dims(spec: TensorSpec, triple: Sequence[Sequence[int]]) -> None:
    """Shapes given for an input must keep its rank and its fixed dims: a static dim cannot range, as a
    batch asked of a static model cannot (``--shapes`` and ``--batch`` are refused alike)."""
    ranks = {len(s) for s in triple}
    if ranks != {len(spec.shape)}:
        raise BatchSpecError(f"input {spec.name!r} has rank {len(spec.shape)} ({list(spec.shape)}), and its "
                             f"{spelled(cli='--shapes', python='shapes=')} have rank {sorted(ranks)}; give "
                             f"{len(spec.shape)} dims per shape")
    for axis, dim in enumerate(spec.shape):
        asked = {int(s[axis]) for s in triple}
        if dim >= 0 and asked != {dim}:
            fix = spelled(cli="add --dynamic-batch", python="pass dynamic_batch=True") if axis == 0 else \
                "leave that dim as the model fixes it"
            raise BatchSpecError(
                f"input {spec.name!r} has dim {axis} fixed at {dim} ({list(spec.shape)}), and "
                f"{spelled(cli='--shapes', python='shapes=')} asks {sorted(asked)} there; the model cannot take "
                f"other sizes there: {fix}")


def _check_asked_batch(inputs: Sequence[TensorSpec], batches: Sequence[BatchProfile], batched: set[str]) -> None:
    """A batch asked for a graph with no batched input must be the graph's own fixed batch."""
    if batched:
        return
    for spec in inputs:
        if not spec.shape or spec.shape[0] < 0:
            continue
        for batch in batches:
            if not (batch.static and batch.opt == spec.shape[0]):
                raise BatchSpecError(
                    f"input {spec.name!r} has a fixed batch {spec.shape[0]} but "
                    f"{spelled(cli='--batch ' + str(batch), python='batch=' + repr(str(batch)))} was asked; "
                    f"{spelled(cli='add --dynamic-batch', python='pass dynamic_batch=True')} to make the batch of "
                    "this static model dynamic, or leave the batch unset to build it as it is")
        return


def resolve_profiles(
    inputs: Sequence[TensorSpec], batches: Sequence[BatchProfile] | None, shapes: Shapes | None = None,
    batched: Sequence[str] | None = None,
) -> tuple[dict[str, dict[str, list[int]]], ...]:
    """Per profile, per input: min/opt/max shapes. Dim 0 of a batched input follows the batch profile.

    Other dynamic dims need ``shapes={name: (min, opt, max)}``; those override the batch rule.
    """
    shapes = dict(shapes or {})
    unknown = set(shapes) - {s.name for s in inputs}
    if unknown:
        raise BatchSpecError(f"{spelled(cli='--shapes', python='shapes=')} names unknown inputs {sorted(unknown)}; "
                             f"inputs are {[s.name for s in inputs]}")
    members = batched_specs(inputs, batched, shapes)
    if batches is not None:
        _check_asked_batch(inputs, batches, members)
    result = []
    for batch in batches or DEFAULT_BATCH:
        profile: dict[str, dict[str, list[int]]] = {}
        for spec in inputs:
            if spec.name in shapes:
                check_fixed_dims(spec, shapes[spec.name])
                lo, mid, hi = (list(map(int, s)) for s in shapes[spec.name])
                profile[spec.name] = {"min": lo, "opt": mid, "max": hi}
            elif not spec.shape:
                profile[spec.name] = {"min": [], "opt": [], "max": []}
            else:
                profile[spec.name] = _input_profile(spec, batch if spec.name in members else None)
        result.append(profile)
    return tuple(result)
