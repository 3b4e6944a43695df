"""Learned rounding of per-channel INT8 weights (AdaRound, Nagel et al., "Up or Down?", 2020), on the CPU.

Per Conv/Gemm/MatMul layer of a ``QuantPlan``, each weight rounds down or up: ``floor(w/s) + h(V)`` with
the rectified sigmoid ``h(V) = clip(sigmoid(V)·(ζ−γ) + γ, 0, 1)`` (ζ = 1.1, γ = −0.1), ``V`` started at
the weight's own fraction. Adam minimises the layer's output error against its FP32 output plus a
regulariser ``λ·Σ(1 − |2h − 1|^β)`` whose β is annealed from 20 to 2 after a 20 % warm-up, which drives
each ``h`` to 0 or 1. The layer's inputs are the **FP32** graph's activations (ONNX Runtime), passed
through the layer's own activation Q/DQ (its plan scale); the target is the FP32 layer on the FP32
inputs. So the reported MSE is exactly what the layer alone, quantized, adds (``plan.only([layer])``).

The result is ordinary per-channel INT8: a weight whose learned integer ``q`` differs from
round-to-nearest is rewritten to ``q·s``, so the plan's Q/DQ with the same scales gives back ``q``
(also after the FP16 pass: FP16's relative error 2^-11 moves ``q·s/s`` by at most 127/2048 < 0.5).
A layer keeps round-to-nearest when learning did not lower its MSE on the collected samples.

The time budget ``max_seconds`` is spread over the layers (time a layer leaves unused passes on);
each layer's iteration count comes from timing its first steps, so the schedule always completes.

Example:
    >>> adjusted, info = learn_rounding(model, plan, data.calib_batches, max_seconds=120, progress=bar)
    >>> info[0]["mse_nearest"], info[0]["mse_learned"]
    (3.1e-05, 1.9e-05)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx_ir as ir

from trtforge.passes.graph import attr, constant_value, copy_model, nodes_by_output, ort_session
from trtforge.passes.qdq import QuantInput, QuantLayer, QuantPlan, broadcast_scales, quantize_weight
from trtforge.quantize.method import Candidate, Method, State

ZETA, GAMMA = 1.1, -0.1
#: Collected input bytes per layer, and layers' inputs held at once (one ONNX Runtime pass per group).
LAYER_BYTES, GROUP_BYTES = 32 << 20, 384 << 20


@dataclass(frozen=True)
class RoundingOptions:
    """The optimiser's settings: Adam's step, the regulariser's weight λ and β schedule, the minibatch,
    iteration bounds, and the samples collected per layer."""

    lr: float = 3e-2
    reg: float = 0.01
    beta: tuple[float, float] = (20.0, 2.0)
    warmup: float = 0.2
    batch: int = 8
    min_iters: int = 10
    max_iters: int = 1000
    max_samples: int = 32
    seed: int = 0
    threads: int | None = 1  # torch CPU threads while optimising (None: torch default; small layers: 1 is fastest)


@dataclass
class _Layer:
    layer: QuantLayer
    weight: QuantInput
    act: QuantInput | None
    array: np.ndarray  # the FP32 weight
    forward: Callable  # (x, w) -> y, torch


def _conv(node: ir.Node, rank: int, bias):
    import torch.nn.functional as F  # noqa: N812

    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    pads = list(attr(node, "pads", [0] * (2 * rank)))
    begin, end = pads[:rank], pads[rank:]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(rank)
    if conv is None:
        return None
    padding = begin if begin == end else [0] * rank
    torch_pads = [p for d in reversed(range(rank)) for p in (begin[d], end[d])]
    stride, dilation = attr(node, "strides", [1] * rank), attr(node, "dilations", [1] * rank)
    group = attr(node, "group", 1)

    def forward(x, w):
        if begin != end:
            x = F.pad(x, torch_pads)
        return conv(x, w, bias, list(stride), list(padding), list(dilation), group)

    return forward


def _forward(node: ir.Node, weight: np.ndarray) -> Callable | None:
    """The layer as a torch function of (input, weight), or None for a form this module leaves alone."""
    import torch

    bias_array = constant_value(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if len(node.inputs) > 2 and node.inputs[2] is not None and bias_array is None:
        return None
    bias = None if bias_array is None else torch.tensor(np.asarray(bias_array, np.float32))
    if node.op_type == "Conv":
        return _conv(node, weight.ndim - 2, bias)
    if weight.ndim != 2:
        return None
    if node.op_type == "MatMul":
        return lambda x, w: x @ w
    if node.op_type == "Gemm" and not attr(node, "transA", 0):
        alpha, beta, trans = attr(node, "alpha", 1.0), attr(node, "beta", 1.0), attr(node, "transB", 0)
        return lambda x, w: alpha * (x @ (w.T if trans else w)) + (0 if bias is None else beta * bias)
    return None


def _layers(model: ir.Model, plan: QuantPlan) -> list[_Layer]:
    """The plan's layers that learned rounding handles: integer per-channel weight at input 1, own
    initializer, activation at input 0."""
    nodes = nodes_by_output(model.graph)
    found = []
    for layer in plan.layers:
        node = nodes.get(layer.output)
        weights = [q for q in layer.inputs if q.is_weight]
        acts = [q for q in layer.inputs if not q.is_weight]
        if node is None or len(weights) != 1 or weights[0].index != 1 or any(q.index != 0 for q in acts):
            continue
        if any(not q.qtype.integer for q in acts):
            continue
        q, value = weights[0], node.inputs[1]
        if not q.qtype.integer or q.block_size or value is None or not value.is_initializer() or len(value.uses()) != 1:
            continue
        array = np.array(value.const_value.numpy(), np.float32)  # a writable copy
        forward = _forward(node, array)
        if forward is not None:
            found.append(_Layer(layer, q, acts[0] if acts else None, array, forward))
    return found


def _groups(layers: list[_Layer]) -> list[list[_Layer]]:
    """The layers in graph order, as many at a time as ``GROUP_BYTES`` of collected inputs allow."""
    size = max(1, GROUP_BYTES // LAYER_BYTES)
    return [layers[i:i + size] for i in range(0, len(layers), size)]


def _collect(model: ir.Model, group: list[_Layer], batches: Sequence[dict], options: RoundingOptions,
             inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """Each layer's FP32 input on the first samples of ``batches`` (at most ``max_samples``, ``LAYER_BYTES``)."""
    names = sorted({inputs[item.layer.output] for item in group})
    session = ort_session(model, extra_outputs=names)
    kept: dict[str, list[np.ndarray]] = {name: [] for name in names}
    room: dict[str, int] = {}
    for batch in batches:
        for name, value in zip(names, session.run(names, batch), strict=True):
            per_sample = max(1, value[:1].nbytes)
            room.setdefault(name, max(1, min(options.max_samples, LAYER_BYTES // per_sample)))
            taken = sum(len(v) for v in kept[name])
            if taken < room[name]:
                kept[name].append(np.asarray(value[: room[name] - taken], np.float32))
        if all(sum(len(v) for v in kept[n]) >= room.get(n, 1) for n in names):
            break
    return {name: np.concatenate(parts) for name, parts in kept.items()}


def _fake_quant(x: np.ndarray, act: QuantInput | None) -> np.ndarray:
    """``x`` through the layer's activation QuantizeLinear → DequantizeLinear (INT8, zero point 0)."""
    if act is None:
        return x
    scale = np.float32(act.scales[0])
    return (np.clip(np.round(x / scale), -128, 127) * scale).astype(np.float32)


def _soft(v, floor, scale, qmax: float):
    """The weight with rounding ``floor + h(V)``, h the rectified sigmoid (0 ≤ h ≤ 1)."""
    import torch

    h = torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)
    return torch.clamp(floor + h, -qmax, qmax) * scale, h


def _initial_v(frac: np.ndarray):
    """V with h(V) = the weight's own fraction (the soft weight starts at the FP32 weight)."""
    import torch

    ratio = np.clip((frac - GAMMA) / (ZETA - GAMMA), 1e-4, 1 - 1e-4)
    return torch.tensor(-np.log(1 / ratio - 1), dtype=torch.float32, requires_grad=True)


def _mse(item: _Layer, x, target, weight) -> float:
    import torch

    with torch.no_grad():
        return float(torch.mean((item.forward(x, weight) - target) ** 2))


@dataclass
class _Problem:
    """One layer's tensors: quantized inputs, FP32 targets, the weight's floor, scales and nearest integers."""

    x: object
    target: object
    floor: object
    scale: object
    nearest: np.ndarray
    qmax: float


def _problem(item: _Layer, fp32_input: np.ndarray) -> _Problem:
    import torch

    scale = broadcast_scales(item.weight, item.array.ndim).astype(np.float32)
    qmax = item.weight.qtype.qmax
    with torch.no_grad():
        target = item.forward(torch.from_numpy(fp32_input), torch.from_numpy(item.array))
    floor = np.floor(np.clip(item.array / scale, -qmax, qmax))
    return _Problem(torch.from_numpy(_fake_quant(fp32_input, item.act)), target, torch.from_numpy(floor),
                    torch.from_numpy(np.broadcast_to(scale, item.array.shape).copy()),
                    quantize_weight(item.array, item.weight).astype(np.float32), qmax)


def _optimise(item: _Layer, p: _Problem, seconds: float, options: RoundingOptions) -> tuple[np.ndarray, int]:
    """The learned integers (hard: h ≥ 0.5 rounds up) after Adam on V; also the iterations run."""
    import torch

    generator = torch.Generator().manual_seed(options.seed)
    v = _initial_v((item.array / p.scale.numpy()) - p.floor.numpy())
    opt = torch.optim.Adam([v], lr=options.lr)
    n = p.x.shape[0]
    batch = min(options.batch, n)
    norm = max(_mse(item, p.x, p.target, torch.from_numpy(p.nearest) * p.scale), 1e-30)
    iters, i, start = options.max_iters, 0, time.perf_counter()
    stop = start + seconds  # a hard stop too: the rounding so far is still a valid choice (guarded below)
    while i < iters and (i < options.min_iters or time.perf_counter() < stop):
        pick = torch.randperm(n, generator=generator)[:batch]
        weight, h = _soft(v, p.floor, p.scale, p.qmax)
        rec = torch.mean((item.forward(p.x[pick], weight) - p.target[pick]) ** 2) / norm
        progress = (i / iters - options.warmup) / (1 - options.warmup)
        if progress < 0:
            loss = rec
        else:
            b_hi, b_lo = options.beta
            beta = b_lo + 0.5 * (b_hi - b_lo) * (1 + np.cos(np.pi * progress))
            loss = rec + options.reg * torch.sum(1 - torch.abs(2 * h - 1) ** beta) / h.numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
        i += 1
        if i == 1:
            start = time.perf_counter()
        elif i == 5:  # the pace of steps 2-5 sets how many fit in this layer's time
            per_step = (time.perf_counter() - start) / 4
            iters = int(np.clip(seconds / max(per_step, 1e-6), options.min_iters, options.max_iters))
    with torch.no_grad():
        h = torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)
        learned = torch.clamp(p.floor + (h >= 0.5).float(), -p.qmax, p.qmax)
    return learned.numpy(), i


def _round_layer(item: _Layer, fp32_input: np.ndarray, seconds: float, options: RoundingOptions) -> tuple[np.ndarray, dict]:
    """The layer's new FP32 weight (learned integers where they differ, as ``q·s``) and what happened."""
    import torch

    start = time.perf_counter()
    p = _problem(item, fp32_input)
    learned, iters = _optimise(item, p, seconds, options)
    near = _mse(item, p.x, p.target, torch.from_numpy(p.nearest) * p.scale)
    mse = _mse(item, p.x, p.target, torch.from_numpy(learned) * p.scale)
    kept = mse < near
    changed = learned != p.nearest
    weight = np.where(changed, learned * p.scale.numpy(), item.array).astype(np.float32) if kept else item.array
    info = {"layer": item.layer.label, "output": item.layer.output, "samples": int(p.x.shape[0]),
            "iterations": iters, "seconds": round(time.perf_counter() - start, 3), "mse_nearest": near,
            "mse_learned": mse if kept else near, "applied": bool(kept),
            "changed": float(changed.mean()) if kept else 0.0}
    return weight, info


def learn_rounding(model: ir.Model, plan: QuantPlan, batches: Sequence[dict[str, np.ndarray]],
                   max_seconds: float = 120.0, progress=None, options: RoundingOptions | None = None,
                   ) -> tuple[ir.Model, list[dict]]:
    """A copy of ``model`` whose weights of the plan's layers carry learned INT8 rounding, and per layer
    what was done (MSE with nearest and learned rounding on the collected samples, iterations, seconds)."""
    import torch

    options = options or RoundingOptions()
    layers = _layers(model, plan)
    out = copy_model(model)
    if not layers:
        return out, []
    task = progress.add_task(f"learned rounding ({max_seconds:g} s)", total=len(layers)) if progress else None
    deadline, info = time.perf_counter() + max_seconds, []
    threads = torch.get_num_threads()
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        _round_groups(model, out, layers, batches, deadline, options, progress, task, info)
    finally:
        torch.set_num_threads(threads)
    return out, info


def restore_weights(model: ir.Model, original: ir.Model, learned: QuantPlan, final: QuantPlan) -> ir.Model:
    """``model`` with the original weights back in the layers of ``learned`` that ``final`` leaves in float
    (placement gave them back to FP16: their learned rounding would only perturb them)."""
    if model is original:
        return model
    kept = {layer.output for layer in final.layers}
    nodes, before = nodes_by_output(model.graph), nodes_by_output(original.graph)
    for layer in learned.layers:
        node = nodes.get(layer.output)
        if layer.output in kept or node is None or len(node.inputs) < 2 or not node.inputs[1].is_initializer():
            continue
        name = node.inputs[1].name
        model.graph.initializers[name].const_value = before[layer.output].inputs[1].const_value
    return model


def _round_groups(model: ir.Model, out: ir.Model, layers: list[_Layer], batches, deadline: float,
                  options: RoundingOptions, progress, task, info: list[dict]) -> None:
    """Round ``layers`` (a group's inputs collected at a time), writing the new weights into ``out``."""
    nodes = nodes_by_output(model.graph)
    inputs = {item.layer.output: nodes[item.layer.output].inputs[0].name for item in layers}
    for group in _groups(layers):
        collected = _collect(model, group, batches, options, inputs)
        for item in group:
            left = len(layers) - len(info)
            seconds = max(0.0, deadline - time.perf_counter()) / left
            weight, record = _round_layer(item, collected[inputs[item.layer.output]], seconds, options)
            name = nodes[item.layer.output].inputs[1].name
            dtype = out.graph.initializers[name].const_value.numpy().dtype
            out.graph.initializers[name].const_value = ir.tensor(weight.astype(dtype), name=name)
            info.append(record)
            if task is not None:
                progress.update(task, advance=1, description=f"learned rounding: {item.layer.label}")
        del collected


def _run(state: State) -> Candidate:
    rounded, layers = learn_rounding(state.model, state.plan, state.data.calib_batches, state.config.rounding_seconds,
                                     progress=state.progress)
    return Candidate(replace(state, model=rounded, sim_out=None), {"layers": layers})


#: Per layer it lowered the output MSE; kept when the whole graph agrees. With ``placement="auto"`` it runs on
#: every candidate before the search, so placement measures the learned weights (fewer layers go back to FP16).
METHOD = Method(name="learned_rounding", keep="not_worse", run=_run,
                stage=lambda config: "start_plan" if config.placement == "auto" else "placed",
                applies=lambda config, spec: config.rounding == "learned")
