"""Issue 35's acceptance sweep: every command the docs show, on held-out architectures the matrix does not hold.

The models are transformers architectures from tiny configs (random weights, never downloaded) and two plain
PyTorch nets (a 3-D conv net, a detector head that decodes anchors), none of them in tests/matrix. Each goes
through both of torch's exporters (``dynamo``: the weights in ``NAME.onnx.data`` beside the file;
``torchscript``: ``dynamo=False`` at opset 17) and then through every command, run in this process from another
working folder (tests/support/cli_in_process.py). Each command's outcome is tests/matrix/driver.py's
classification (``outcome``): ``pass`` and ``refused`` (one ``error:`` line) are fine; ``traceback``,
``self-compare``, ``messy`` and ``wrong`` are findings.

Writes ``OUT/heldout_sweep.json`` (every cell: argv, exit, outcome, line, seconds) and ``OUT/heldout_sweep.md``
(the counts per outcome and the findings), and prints the findings as they come. docs/conformance.md's
"Held-out sweep" section cites a run.

Run:
    $ python bench/heldout_sweep.py --out /tmp/sweep                          # every model, both exporters
    $ python bench/heldout_sweep.py --out /tmp/sweep --docs   # and docs/conformance.md's section, docs/bench JSON
    $ python bench/heldout_sweep.py --out /tmp/sweep --models cvt,mpnet --exporters dynamo
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "matrix"), str(ROOT / "tests" / "support")]

_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
_TEXT = {"vocab_size": 64, "max_position_embeddings": 40, **_VIT}
_IMAGE = ("1x3x32x32",)
_TOKENS = ("int64:1x16",)
#: name → (model class, config class, config fields, output key(s), input shapes); "" class: a plain PyTorch net.
HELD_OUT: dict[str, tuple[str, str, dict, str | tuple[str, ...], tuple[str, ...]]] = {
    "dinov2_registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig",
                         {"image_size": 28, "patch_size": 7, "num_register_tokens": 2, "mlp_ratio": 2,
                          **{k: v for k, v in _VIT.items() if k != "intermediate_size"}}, "pooler_output",
                         ("1x3x28x28",)),
    "vit_msn": ("ViTMSNModel", "ViTMSNConfig", {"image_size": 32, "patch_size": 8, **_VIT}, "last_hidden_state",
                _IMAGE),
    "cvt": ("CvtModel", "CvtConfig", {"embed_dim": [8, 16], "num_heads": [1, 2], "depth": [1, 2],
                                      "patch_sizes": [7, 3], "patch_stride": [4, 2], "patch_padding": [2, 1],
                                      "mlp_ratio": [2.0, 2.0], "attention_drop_rate": [0.0, 0.0],
                                      "drop_rate": [0.0, 0.0], "drop_path_rate": [0.0, 0.0], "qkv_bias": [True, True],
                                      "cls_token": [False, True], "qkv_projection_method": ["dw_bn", "dw_bn"],
                                      "kernel_qkv": [3, 3], "padding_kv": [1, 1], "stride_kv": [2, 2],
                                      "padding_q": [1, 1], "stride_q": [1, 1]}, "last_hidden_state", _IMAGE),
    "focalnet": ("FocalNetModel", "FocalNetConfig", {"image_size": 32, "patch_size": 4, "embed_dim": 16,
                                                     "depths": [1, 1], "focal_levels": [2, 2],
                                                     "focal_windows": [3, 3]}, "pooler_output", _IMAGE),
    "hiera": ("HieraModel", "HieraConfig", {"image_size": [32, 32], "patch_size": [7, 7], "patch_stride": [4, 4],
                                            "patch_padding": [3, 3], "embed_dim": 16, "depths": [1, 1],
                                            "num_heads": [1, 2], "query_stride": [2, 2], "masked_unit_size": [2, 2], "num_query_pool": 1,
                                            "mlp_ratio": 2.0}, "pooler_output", _IMAGE),
    "pvt_v2": ("PvtV2Model", "PvtV2Config", {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1],
                                             "hidden_sizes": [8, 16], "patch_sizes": [7, 3], "strides": [4, 2],
                                             "num_attention_heads": [1, 2], "mlp_ratios": [2, 2]},
               "last_hidden_state", _IMAGE),
    "mobilenet_v1": ("MobileNetV1Model", "MobileNetV1Config", {"image_size": 32, "depth_multiplier": 0.25},
                     "pooler_output", _IMAGE),
    "bit": ("BitModel", "BitConfig", {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1],
                                      "layer_type": "bottleneck", "num_groups": 4}, "pooler_output", _IMAGE),
    "speech2text_encoder": ("Speech2TextEncoder", "Speech2TextConfig",
                            {"vocab_size": 64, "d_model": 16, "encoder_layers": 1, "encoder_attention_heads": 2,
                             "encoder_ffn_dim": 32, "decoder_layers": 1, "decoder_attention_heads": 2,
                             "decoder_ffn_dim": 32, "max_source_positions": 64, "input_feat_per_channel": 16,
                             "conv_channels": 16, "num_conv_layers": 2}, "last_hidden_state", ("1x32x16",)),
    "whisper_encoder_8mel": ("WhisperEncoder", "WhisperConfig",
                             {"num_mel_bins": 8, "d_model": 24, "encoder_layers": 2, "encoder_attention_heads": 3,
                              "encoder_ffn_dim": 48, "decoder_layers": 1, "decoder_attention_heads": 3,
                              "decoder_ffn_dim": 48, "max_source_positions": 12, "vocab_size": 64,
                              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}, "last_hidden_state",
                             ("1x8x24",)),
    "deberta_v2": ("DebertaV2Model", "DebertaV2Config", {**_TEXT, "relative_attention": True,
                                                        "position_buckets": 8, "pos_att_type": ["p2c", "c2p"]},
                   "last_hidden_state", _TOKENS),
    "mpnet": ("MPNetModel", "MPNetConfig", {**_TEXT}, "pooler_output", _TOKENS),
    "xlm_roberta": ("XLMRobertaModel", "XLMRobertaConfig", {**_TEXT, "pad_token_id": 1}, "last_hidden_state",
                    _TOKENS),
    "electra": ("ElectraModel", "ElectraConfig", {**_TEXT, "embedding_size": 16}, "last_hidden_state", _TOKENS),
    "hubert": ("HubertModel", "HubertConfig", {**_VIT, "conv_dim": (16, 16), "conv_stride": (5, 2),
                                               "conv_kernel": (10, 3), "num_conv_pos_embeddings": 16,
                                               "num_conv_pos_embedding_groups": 2}, "last_hidden_state", ("1x400",)),
    "data2vec_vision": ("Data2VecVisionModel", "Data2VecVisionConfig",
                        {"image_size": 32, "patch_size": 8, "use_relative_position_bias": True, **_VIT},
                        "last_hidden_state", _IMAGE),
    "conditional_detr": ("ConditionalDetrForObjectDetection", "ConditionalDetrConfig",
                         {"use_timm_backbone": False, "use_pretrained_backbone": False,
                          "backbone_config": {"model_type": "resnet", "embedding_size": 8, "hidden_sizes": [8, 16],
                                              "depths": [1, 1], "layer_type": "basic", "out_features": ["stage2"]},
                          "d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                          "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
                          "num_queries": 5, "num_labels": 3}, ("logits", "pred_boxes"), ("1x3x64x64",)),
    "conv3d_resnet": ("", "", {}, "", ("1x2x4x16x16",)),
    "anchor_detector": ("", "", {}, "", ("1x3x32x32",)),
}
EXPORTERS = ("dynamo", "torchscript")
#: Terminal colour codes (the dynamo exporter colours its messages).
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FINDINGS = ("traceback", "self-compare", "messy", "wrong")


def _conv3d_resnet():
    """Conv3d + BatchNorm3d + a residual + AvgPool3d/MaxPool3d over a two-channel clip (N, C, T, H, W)."""
    import torch
    from torch import nn

    class Conv3dResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv3d(2, 8, (3, 5, 5), padding=(1, 2, 2)), nn.BatchNorm3d(8), nn.GELU())
            self.block = nn.Sequential(nn.Conv3d(8, 8, 3, padding=1, groups=2), nn.BatchNorm3d(8), nn.ReLU(),
                                       nn.Conv3d(8, 8, 1))
            self.pool = nn.AvgPool3d((2, 2, 2))
            self.down = nn.Sequential(nn.Conv3d(8, 12, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool3d((1, 2, 2)))
            self.head = nn.Linear(12, 6)

        def forward(self, x):
            y = self.stem(x)
            y = self.pool(torch.relu(y + self.block(y)))
            return self.head(self.down(y).mean(dim=(2, 3, 4)))

    return Conv3dResNet().eval()


def _anchor_detector():
    """A one-level anchor detector: a conv trunk, box deltas decoded against fixed anchors, sigmoid scores."""
    import torch
    from torch import nn

    class AnchorDetector(nn.Module):
        def __init__(self, anchors: int = 2, classes: int = 3) -> None:
            super().__init__()
            self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU(),
                                       nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU())
            self.deltas = nn.Conv2d(16, anchors * 4, 1)
            self.logits = nn.Conv2d(16, anchors * classes, 1)
            grid = torch.stack(torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="xy"), -1) * 4 + 2
            sizes = torch.tensor([[8.0, 8.0], [16.0, 8.0]])
            anchors_xywh = torch.cat([grid[:, :, None].expand(8, 8, anchors, 2), sizes.expand(8, 8, anchors, 2)], -1)
            self.register_buffer("anchors", anchors_xywh.reshape(-1, 4))
            self.classes = classes

        def forward(self, x):
            f = self.trunk(x)
            d = self.deltas(f).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 4)
            centre = self.anchors[:, :2] + d[..., :2] * self.anchors[:, 2:]
            size = self.anchors[:, 2:] * torch.exp(d[..., 2:].clamp(max=4.0))
            boxes = torch.cat([centre - size / 2, centre + size / 2], -1)
            scores = self.logits(f).permute(0, 2, 3, 1).reshape(x.shape[0], -1, self.classes).sigmoid()
            return boxes, scores

    return AnchorDetector().eval()


def build(name: str):
    """The seeded module of ``name`` (outputs a tensor or a tuple)."""
    import torch

    torch.manual_seed(0)
    if name == "conv3d_resnet":
        return _conv3d_resnet()
    if name == "anchor_detector":
        return _anchor_detector()
    import transformers as T

    model_class, config_class, fields, key, _ = HELD_OUT[name]
    config = getattr(T, config_class)(**fields)
    if model_class == "Speech2TextEncoder":
        from transformers.models.speech_to_text.modeling_speech_to_text import Speech2TextEncoder as cls
    elif model_class == "WhisperEncoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder as cls
    else:
        cls = getattr(T, model_class)
    from matrix_models import _plain

    return _plain(cls(config).eval(), key)


def __getattr__(name: str):
    """``heldout_sweep:NAME``: the factory ``coverage`` and ``build --path direct`` import."""
    if name in HELD_OUT:
        return lambda: build(name)
    raise AttributeError(name)


def example_inputs(name: str) -> tuple:
    import matrix_models

    return matrix_models.random_inputs(HELD_OUT[name][4])


def export(name: str, exporter: str, folder: Path) -> tuple[Path | None, str]:
    """(the ONNX file, "") or (None, the exporter's refusal): dynamo with external data, or TorchScript at 17."""
    import torch

    path = folder / f"{name}.onnx"
    options = {"dynamo": True, "external_data": True} if exporter == "dynamo" else {"dynamo": False,
                                                                                    "opset_version": 17}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(build(name), example_inputs(name), str(path), **options)
    except Exception as exc:  # the exporter's refusal is the row's line, not a trtforge finding
        reason = ANSI.sub("", str(exc)).splitlines()[0][:200]
        return None, f"torch.onnx.export({exporter}) fails: {type(exc).__name__}: {reason}"
    return path, ""


def _calibration(model: Path, path: Path, count: int = 8) -> Path:
    """``count`` random samples per input (token ids below 8), named like the inputs."""
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    with OnnxRuntimeEngine(model) as engine:
        specs = engine.inputs
    rng = np.random.default_rng(0)
    arrays = {}
    for spec in specs:
        shape = (count, *[d if isinstance(d, int) and d > 0 else 1 for d in spec.shape[1:]])
        arrays[spec.name] = (rng.standard_normal(shape).astype(np.float32) if spec.dtype.startswith("float")
                             else rng.integers(0, 8, shape).astype(spec.dtype))
    np.savez(path, **arrays)
    return path


#: build tag → extra flags (every build: cheapest optimization level, quiet, its own output folder).
BUILDS = {"fp32": ["--precision", "fp32"], "fp16": ["--precision", "fp16"], "bf16": ["--precision", "bf16"],
          "int8": ["--precision", "int8", "--calib", "{calib}", "--calib-batch-size", "4", "--allow-unaccelerated"],
          "fp8": ["--precision", "fp8", "--calib", "{calib}", "--calib-batch-size", "4", "--target", "sm89"],
          "int8-wo": ["--precision", "int8-wo"], "int4-wo": ["--precision", "int4-wo"],
          "fp16-dynbatch": ["--precision", "fp16", "--dynamic-batch", "--batch", "1:2:4"]}


def cells(name: str, model: str, calib: str, torch_cells: bool) -> list[tuple[str, list[str]]]:
    """(cell, argv) in order; ``{art:TAG}`` is the sidecar the build TAG wrote, ``{dir:TAG}`` its folder."""
    table = [("inspect onnx", ["inspect", model])]
    for tag, flags in BUILDS.items():
        table.append((f"build {tag}", ["build", model, *[f.format(calib=calib) for f in flags], "-o", f"../out/{tag}",
                                       "--name", name, "-q", "--opt-level", "0"]))
    for tag in BUILDS:
        table.append((f"inspect {tag}", ["inspect", f"{{art:{tag}}}"]))
        table.append((f"check {tag}", ["check", f"{{art:{tag}}}", "--route", "onnxruntime", "--samples", "4",
                                       "--repeats", "1"]))
    table += [
        ("compare onnx-vs-fp16", ["compare", model, "{art:fp16}@onnxruntime", "--samples", "2"]),
        ("compare fp16-vs-bf16", ["compare", "{art:fp16}@onnxruntime", "{art:bf16}@onnxruntime", "--samples", "2"]),
        ("compare --layerwise fp16", ["compare", "--layerwise", f"../out/fp16/{name}_reference_fp32.onnx",
                                      f"../out/fp16/{name}_fp16.onnx", "--samples", "2"]),
        ("compare --layerwise bf16", ["compare", "--layerwise", f"../out/bf16/{name}_reference_fp32.onnx",
                                      f"../out/bf16/{name}_bf16.onnx", "--samples", "2"]),
        ("debug precision fp16", ["debug", "precision", model, "--precision", "fp16", "--metric", "rel_l2",
                                  "--target", "0.01", "--data", calib, "--samples", "4", "--held-out", "4",
                                  "--max-seconds", "3"]),
        ("export triton", ["export", "triton", "{art:fp16}", "--repo", "../repo"]),
        ("quantize sensitivity int8", ["quantize", "sensitivity", model, "--data", calib, "--top", "3",
                                       "--calib-batch-size", "4"]),
        ("bench onnxruntime", ["bench", "{art:fp16}", "--route", "onnxruntime", "--warmup", "1", "--repeats", "3",
                               "--device", "cpu"]),
        ("tune onnxruntime", ["tune", model, "--data", calib, "-o", "../tuned", "--route", "onnxruntime",
                              "--precision", "fp16", "--batch", "1", "--opt-level", "0", "--warmup", "1",
                              "--repeats", "3", "-q"]),
        ("serve onnxruntime", ["serve", "{art:fp16}", "--route", "onnxruntime"]),  # driver.serve_cell: one request
    ]
    if torch_cells:
        factory = f"heldout_sweep:{name}"
        shapes = [x for s in HELD_OUT[name][4] for x in ("--input-shape", s)]
        table += [("coverage", ["coverage", factory, *shapes]),
                  ("build --path direct fp16", ["build", factory, "--path", "direct", *shapes, "--precision", "fp16",
                                                "-o", "../direct", "--name", name, "-q", "--opt-level", "0"])]
    return table


def _resolve(argv: list[str], here: Path) -> tuple[list[str], str]:
    """argv with ``{art:TAG}`` replaced by that build's sidecar (relative to ``here``), or ([], why not)."""
    out = []
    for arg in argv:
        head, sep, tail = arg.partition("@")
        if head.startswith("{art:"):
            tag = head[5:-1]
            found = sorted((here / ".." / "out" / tag).glob("*.json"))
            if not found:
                return [], f"build {tag} wrote no sidecar"
            arg = os.path.relpath(found[0], here) + sep + tail
        elif head.startswith("../out/") and head.endswith(".onnx") and not (here / head).exists():
            return [], f"no {Path(head).name}: its build did not write it"
        out.append(arg)
    return out, ""


def run_row(name: str, exporter: str, work: Path, torch_cells: bool) -> list[dict]:
    """Every cell of one (model, exporter) row, each run in ``work/elsewhere``."""
    from driver import run_cell

    here = work / "elsewhere"
    for folder in (here, work / "model"):
        folder.mkdir(parents=True, exist_ok=True)
    path, why = export(name, exporter, work / "model")
    row = f"{name}/{exporter}"
    if path is None:
        print(f"{row:32s} export n/a {why}", flush=True)
        return [{"row": row, "cell": "export", "argv": [], "exit": None, "outcome": "n/a", "line": why, "cpu": 0.0}]
    calib = os.path.relpath(_calibration(path, work / "calib.npz"), here)
    records = []
    for cell, template in cells(name, os.path.relpath(path, here), calib, torch_cells):
        argv, missing = _resolve(template, here)
        cpu, wall = time.process_time(), time.perf_counter()
        if not argv:
            records.append({"row": row, "cell": cell, "argv": template, "exit": None, "outcome": "n/a",
                            "line": missing, "cpu": 0.0})
            print(f"{row:32s} {cell:26s} n/a          {missing}", flush=True)
            continue
        code, kind, line, output = run_cell(argv, here)
        records.append({"row": row, "cell": cell, "argv": argv, "exit": code, "outcome": kind, "line": line,
                        "cpu": round(time.process_time() - cpu, 2), "seconds": round(time.perf_counter() - wall, 2)})
        if kind in FINDINGS:
            records[-1]["stderr_tail"] = output[-3000:]
        print(f"{row:32s} {cell:26s} {kind:12s} {records[-1]['seconds']:6.1f} s {line[:140]}", flush=True)
    return records


def markdown(records: list[dict], meta: dict) -> str:
    """Command, machine, date; the counts per outcome and per row; the findings; each distinct refusal once."""
    kinds = ("pass", "refused", "n/a", *FINDINGS)
    counts = {k: sum(r["outcome"] == k for r in records) for k in kinds}
    rows = list(dict.fromkeys(r["row"] for r in records))
    lines = [f"Command: `{meta['command']}` · {meta['versions']} · {meta['machine']} · {meta['date']} · "
             f"{meta['seconds']:.0f} s", "",
             f"{len(rows)} rows ({len({r.split('/')[0] for r in rows})} architectures × 2 exporters), "
             f"{len(records)} cells: " + ", ".join(f"{k} {v}" for k, v in counts.items()), "",
             "| row | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for row in rows:
        got = [r["outcome"] for r in records if r["row"] == row]
        lines.append(f"| {row} | " + " | ".join(str(got.count(k)) for k in kinds) + " |")
    findings = [r for r in records if r["outcome"] in FINDINGS]
    lines += ["", "Findings (traceback, messy, self-compare, wrong): " + ("none." if not findings else "")]
    if findings:
        lines += ["", "| row | cell | outcome | line |", "|---|---|---|---|"]
        lines += [f"| {r['row']} | {r['cell']} | {r['outcome']} | {_cell_text(r['line'])} |" for r in findings]
    refusals: dict[tuple[str, str], list[str]] = {}
    for r in records:
        if r["outcome"] == "refused" or (r["cell"] == "export" and r["outcome"] == "n/a"):
            refusals.setdefault((r["cell"], _cell_text(r["line"].replace(r["row"].split("/")[0], "NAME"))),
                                []).append(r["row"])
    lines += ["", "Refusals and measured failures, each distinct line once:", "",
              "| cell | rows | line |", "|---|---|---|"]
    lines += [f"| {cell} | {', '.join(where)} | {line} |" for (cell, line), where in refusals.items()]
    return "\n".join(lines) + "\n"


def _cell_text(line: str) -> str:
    return ANSI.sub("", line).replace("|", "/")[:220]


PAGE = ROOT / "docs" / "conformance.md"
CANONICAL = ROOT / "docs" / "bench" / "heldout_sweep.json"
BEGIN, END = "<!-- heldout:begin -->", "<!-- heldout:end -->"


def summary(records: list[dict], meta: dict) -> dict:
    """The canonical record (docs/bench): counts per row and outcome, and every cell that did not pass."""
    rows: dict[str, dict[str, int]] = {}
    for r in records:
        rows.setdefault(r["row"], {}).setdefault(r["outcome"], 0)
        rows[r["row"]][r["outcome"]] += 1
    keep = ("row", "cell", "argv", "exit", "outcome", "line")
    return {"meta": meta, "rows": rows,
            "not_passed": [{k: r[k] for k in keep if k in r} for r in records if r["outcome"] != "pass"]}


def write_docs(records: list[dict], meta: dict) -> None:
    """docs/bench/heldout_sweep.json and docs/conformance.md's section between the heldout markers."""
    CANONICAL.write_text(json.dumps(summary(records, meta), indent=1) + "\n")
    page = PAGE.read_text()
    intro = ("## Held-out sweep: architectures the matrix does not hold (issue 35)\n\n"
             "Issue 35's acceptance, on models outside tests/matrix: transformers architectures from tiny configs "
             "(random weights) and two plain-PyTorch nets (a 3-D conv net, an anchor-decoding detector head), each "
             "through both exporters (dynamo with `NAME.onnx.data` beside the file, TorchScript at opset 17), every "
             "command the docs show run from another working folder: `inspect`, `build` at fp32/fp16/bf16/int8/fp8/"
             "int8-wo/int4-wo and with `--dynamic-batch`, `inspect` and `check --route onnxruntime --samples 4` of each "
             "artifact, `compare` (onnx vs fp16, fp16 vs bf16), `compare --layerwise` (fp16, bf16), `debug "
             "precision`, `export triton`, `quantize sensitivity`, `bench` and `tune` on the onnxruntime route, "
             "`serve` on a real tritonserver (one request, its answer against the same graph in process), and for "
             "the modules `coverage` and `build --path direct`. Outcomes are tests/matrix/driver.py's: `refused` is "
             "one `error:` line (or a measured FAIL line); `traceback`, `messy`, `self-compare` and `wrong` (a "
             "served answer that differs) are findings. The JSON is docs/bench/heldout_sweep.json.\n\n")
    section = f"{BEGIN}\n{intro}{markdown(records, meta)}{END}"
    if BEGIN in page:
        page = page[: page.index(BEGIN)] + section + page[page.index(END) + len(END):]
    else:
        page = page.rstrip("\n") + "\n\n" + section + "\n"
    PAGE.write_text(page)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default=",".join(HELD_OUT))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--docs", action="store_true", help="also write docs/bench/heldout_sweep.json and the "
                        "section of docs/conformance.md")
    args = parser.parse_args()
    import warnings

    import onnxruntime
    import tensorrt_rtx
    from cli_in_process import environment

    args.out.mkdir(parents=True, exist_ok=True)
    start, records = time.perf_counter(), []
    cache = Path(tempfile.mkdtemp(prefix="trtforge-heldout-cache-"))
    exporters = args.exporters.split(",")
    with environment({"TRTFORGE_CACHE_DIR": str(cache), "PYTHONPATH": str(Path(__file__).parent)}), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.path.insert(0, str(Path(__file__).parent))
        for name in args.models.split(","):
            for exporter in exporters:
                work = Path(tempfile.mkdtemp(prefix=f"trtforge-heldout-{name}-{exporter}-"))
                records += run_row(name, exporter, work, torch_cells=exporter == exporters[-1])
                (args.out / "heldout_sweep.json").write_text(json.dumps({"cells": records}, indent=1))
    meta = {"command": "python bench/heldout_sweep.py " + " ".join(sys.argv[1:]),
            "versions": f"tensorrt_rtx {tensorrt_rtx.__version__}, onnxruntime {onnxruntime.__version__}",
            "machine": f"{platform.machine()} CPU ({os.cpu_count()} cores), no GPU",
            "date": dt.date.today().isoformat(), "seconds": time.perf_counter() - start}
    (args.out / "heldout_sweep.json").write_text(json.dumps({"meta": meta, "cells": records}, indent=1))
    text = markdown(records, meta)
    (args.out / "heldout_sweep.md").write_text(text)
    if args.docs:
        write_docs(records, meta)
    print(text)


if __name__ == "__main__":
    main()
