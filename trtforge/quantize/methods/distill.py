"""Quantization-aware fine-tuning of a ``QuantPlan``'s graph, distilled from the FP32 graph: ``finetune``.

The FP32 onnx_ir graph runs in PyTorch (``trtforge.quantize.methods.torch_graph.TorchGraph``: the graph's own
nodes and tensor names, so the plan applies as it is written). Where the plan puts an activation Q/DQ,
the layer's input is fake-quantized per tensor with the plan's calibrated scale (INT8, −128…127); each
quantized layer's weight is a trainable FP32 tensor fake-quantized per output channel with the plan's
weight scales (−127…127, as ``passes.qdq.quantize_weight``); the biases of quantized layers are
trainable in FP32. Gradients pass the rounding straight through (STE; zero where a value saturates:
``torch.fake_quantize_per_*_affine``). The scales stay the plan's: only weights and biases move.

The loss is distillation against the FP32 graph's outputs on the calibration samples (no labels):
``"mse"`` (each output's mean squared error, normalised by its FP32 mean square) or ``"kl"`` (softmax
KL divergence of the first output, for classifiers). Adam with a small step, minibatches drawn with a
fixed seed, until ``max_seconds`` (or ``max_steps``) runs out.

The result is an ordinary FP32 graph for the same plan: each quantized weight is written back as its
value on the plan's grid (``q·s``, so ``apply_plan`` gives back exactly the integers trained, also after
the FP16 pass), biases as trained. ``quantizer.quantize_model`` keeps it only when it lowers the
held-back error (``bias_correction.verdict``).

Example:
    >>> tuned, info = finetune(model, plan, data.calib_batches, max_seconds=60, progress=bar)
    >>> info["steps"], info["loss_first"], info["loss_last"]
    (412, 0.081, 0.012)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
import torch

from trtforge.passes.graph import copy_model, nodes_by_output
from trtforge.passes.qdq import QuantInput, QuantPlan, dequantized_weight
from trtforge.quantize.methods.bias_correction import find_bias
from trtforge.quantize.methods.torch_graph import TorchGraph
from trtforge.quantize.report import run_model

LOSSES = ("mse", "kl")


@dataclass(frozen=True)
class FinetuneOptions:
    """Adam's step, the minibatch, the loss, the step bound and seed."""

    lr: float = 0.02  # Adam's step, as a share of the unit of each value (``units``)
    batch: int = 16
    loss: str = "mse"
    max_steps: int = 100_000
    seed: int = 0
    threads: int | None = None  # torch CPU threads (None: torch's default)


def _fake_activation(q: QuantInput):
    scale = float(q.scales[0])
    return lambda x: torch.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127)


def _fake_weight(q: QuantInput):
    if q.axis is None:
        return lambda w: torch.fake_quantize_per_tensor_affine(w, float(q.scales[0]), 0, -127, 127)
    scales = torch.tensor(q.scales, dtype=torch.float32)
    zeros = torch.zeros(len(q.scales), dtype=torch.int32)
    return lambda w: torch.fake_quantize_per_channel_affine(w, scales, zeros, q.axis % w.dim(), -127, 127)


def check_plan(plan: QuantPlan) -> None:
    """Refuse a plan fine-tuning cannot simulate (FP8, INT4, blocked scales), in one line."""
    odd = sorted({q.dtype if q.dtype != "int8" else "blocked scales" for layer in plan.layers for q in layer.inputs
                  if q.dtype != "int8" or q.block_size})
    if odd:
        raise NotImplementedError(f"fine-tuning simulates INT8 per-tensor/per-channel Q/DQ, not {', '.join(odd)}")


def fake_quant_inputs(plan: QuantPlan) -> dict[tuple[str, int], object]:
    """(layer output, input index) → the fake quantization ``TorchGraph.forward`` applies to that input."""
    check_plan(plan)
    return {(layer.output, q.index): _fake_weight(q) if q.is_weight else _fake_activation(q)
            for layer in plan.layers for q in layer.inputs}


def _unit(shape: tuple[int, ...], scales: np.ndarray, axis: int | None) -> torch.Tensor:
    """Per-channel ``scales`` shaped to broadcast along ``axis`` of a tensor of ``shape``."""
    if axis is None or scales.size == 1:
        return torch.tensor(float(scales.mean()))
    view = [1] * len(shape)
    view[axis % len(shape)] = -1
    return torch.from_numpy(scales.astype(np.float32).reshape(view))


def trainable(model: ir.Model, plan: QuantPlan) -> tuple[dict[str, QuantInput], dict[str, torch.Tensor]]:
    """The plan's weight initializers (name → its weight ``QuantInput``), and every trainable initializer's unit:
    a weight's per-channel quantization step; a bias's the step of its layer's accumulator (weight step ×
    activation step) times √fan-in, about the size of the rounding noise the bias can cancel."""
    nodes = nodes_by_output(model.graph)
    inits = model.graph.initializers
    weights: dict[str, QuantInput] = {}
    units: dict[str, torch.Tensor] = {}
    for layer in plan.layers:
        node, w, a = nodes[layer.output], layer.weight, layer.activation
        value = node.inputs[w.index] if w is not None else None
        if value is None or value.name not in inits or value.name in weights:
            continue
        shape = tuple(inits[value.name].const_value.shape)
        weights[value.name] = w
        units[value.name] = _unit(shape, np.asarray(w.scales), w.axis)
        bias = find_bias(node)
        if bias is not None and bias[0] in inits and bias[0] not in units and a is not None:
            fan_in = int(np.prod(shape)) // max(shape[w.axis], 1) if w.axis is not None else int(np.prod(shape))
            step = np.asarray(w.scales, np.float32) * float(a.scales[0]) * np.sqrt(fan_in)
            units[bias[0]] = _unit(tuple(inits[bias[0]].const_value.shape), step, -1 if step.size > 1 else None)
    return weights, units


def stack_batches(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """The batches' samples, one tensor per input."""
    return {name: torch.from_numpy(np.concatenate([b[name] for b in batches])) for name in batches[0]}


def distill_loss(student: list[torch.Tensor], teacher: list[torch.Tensor], loss: str) -> torch.Tensor:
    """``mse``: per sample, each float output's squared error over its FP32 square norm (the held-back
    check's relative L2, squared), averaged; ``kl``: softmax KL divergence of output 0."""
    if loss == "kl":
        return torch.nn.functional.kl_div(torch.log_softmax(student[0], -1), torch.log_softmax(teacher[0], -1),
                                          reduction="batchmean", log_target=True)
    total = student[0].new_zeros(())
    for s, t in zip(student, teacher, strict=True):
        if t.is_floating_point():
            err = ((s - t) ** 2).reshape(len(t), -1).sum(1) / (t**2).reshape(len(t), -1).sum(1).clamp_min(1e-12)
            total = total + err.mean()
    return total


def write_back(model: ir.Model, graph: TorchGraph, weights: dict[str, QuantInput]) -> ir.Model:
    """A copy of ``model`` with ``graph``'s trained parameters: weights on the plan's grid (q·s), biases as trained."""
    out = copy_model(model)
    inits = out.graph.initializers
    for name, value in graph.values().items():
        array = value.detach().numpy().astype(np.float32)
        if name in weights:
            array = dequantized_weight(array, weights[name])
        dtype = inits[name].const_value.numpy().dtype
        inits[name].const_value = ir.tensor(array.astype(dtype), name=name)
    return out


def _optimizer(graph: TorchGraph, options: FinetuneOptions) -> torch.optim.Optimizer:
    """Adam on the parameters in their units (a weight moves about ``lr`` of its channel's quantization
    step per step, whatever the layer's range)."""
    return torch.optim.Adam(list(graph.params.values()), lr=options.lr)


def _train(graph: TorchGraph, fake, samples, targets, max_seconds: float, options: FinetuneOptions,
           progress, task) -> dict:
    """Adam steps until the time or step bound; (steps, first/last loss averages) for the report."""
    generator = torch.Generator().manual_seed(options.seed)
    n = next(iter(samples.values())).shape[0]
    batch = min(options.batch, n)
    opt = _optimizer(graph, options)
    start = time.perf_counter()
    losses: list[float] = []
    step = 0
    while step < options.max_steps and (time.perf_counter() - start < max_seconds or step == 0):
        pick = torch.randperm(n, generator=generator)[:batch]
        out = graph.forward({k: v[pick] for k, v in samples.items()}, inputs=fake)
        loss = distill_loss(out, [t[pick] for t in targets], options.loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if task is not None:
            done = min(time.perf_counter() - start, max_seconds)
            progress.update(task, completed=done, description=f"fine-tuning: step {step}, loss {losses[-1]:.4g}")
    window = max(1, min(20, len(losses) // 5))
    return {"steps": step, "loss_first": float(np.mean(losses[:window])),
            "loss_last": float(np.mean(losses[-window:])), "train_seconds": round(time.perf_counter() - start, 3)}


def finetune(model: ir.Model, plan: QuantPlan, batches: Sequence[dict[str, np.ndarray]], max_seconds: float = 60.0,
             progress=None, options: FinetuneOptions | None = None, reference: ir.Model | None = None,
             ) -> tuple[ir.Model, dict]:
    """A copy of ``model`` whose quantized layers' weights and biases were fine-tuned under ``plan``'s fake
    quantization to match the FP32 outputs of ``reference`` (default: ``model``; ONNX Runtime) on ``batches``,
    and what was done. Pass the user's graph as ``reference`` when ``model`` is already changed (bias
    correction moves its FP32 function)."""
    options = options or FinetuneOptions()
    if options.loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {options.loss!r}")
    fake = fake_quant_inputs(plan)
    weights, units = trainable(model, plan)
    threads = torch.get_num_threads()
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        graph = TorchGraph(model, trainable=units)
        samples = stack_batches(batches)
        targets = [torch.from_numpy(t) for t in run_model(reference or model, batches)]
        task = progress.add_task(f"fine-tuning ({max_seconds:g} s)", total=max_seconds) if progress else None
        info = _train(graph, fake, samples, targets, max_seconds, options, progress, task)
    finally:
        torch.set_num_threads(threads)
    info.update({"weights": len(weights), "biases": len(units) - len(weights), "samples": int(targets[0].shape[0]),
                 "loss": options.loss, "lr": options.lr})
    return write_back(model, graph, weights), info
