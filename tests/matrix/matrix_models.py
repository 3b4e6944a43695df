"""The foreign models of the command × model matrix: nobody in this project wrote them.

- PP-OCRv4 detector and recognizer: the ONNX files inside the ``rapidocr_onnxruntime`` wheel;
- transformers architectures from small configs with random weights (never downloaded), each a
  module factory ``matrix_models:NAME`` that ``trtforge coverage`` and ``build --path direct`` import;
- more architectures from a table (``architectures.py``: vision, detection, depth, multimodal, text, audio and
  video encoders, two plain-PyTorch conv nets), factories ``matrix_models:NAME`` too;
- odd ONNX graphs written with ``onnx.helper``: a scalar output, an input that is also an output,
  no input, int64 and bool inputs, opset 7 and opset 23;
- ultralytics YOLO files that ``make setup`` exports into ``.venv-yolo/models`` (issue 37), when they are there.

``MODELS`` is the table of models: name → (kind, input shapes for ``--input-shape``). ``ROWS`` is what the
matrix runs: each torch model once per exporter (``vit/dynamo``: torch's default exporter, weights in
``vit.onnx.data`` beside the file; ``vit/torchscript``: ``dynamo=False``), each other model once.

Example:
    >>> module = vit(); module(*EXAMPLES["vit"]()).shape
    torch.Size([1, 17, 32])
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import numpy as np
from architectures import ARCHITECTURES, build

#: name → (kind, ``--input-shape`` values). kind: "torch" (a factory here), "onnx" (a file ``onnx_file`` writes),
#: "yolo" (a file in ``YOLO_MODELS``, written by ``make setup``; the row is skipped with a reason without it).
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ppocr_det": ("onnx", ()),
    "ppocr_rec": ("onnx", ()),
    "vit": ("torch", ("1x3x32x32",)),
    "deit": ("torch", ("1x3x32x32",)),
    "dinov2": ("torch", ("1x3x28x28",)),
    "swin": ("torch", ("1x3x32x32",)),
    "convnext": ("torch", ("1x3x32x32",)),
    "segformer": ("torch", ("1x3x32x32",)),
    "detr": ("torch", ("1x3x64x64",)),
    "minilm": ("torch", ("int64:1x16",)),
    "whisper_encoder": ("torch", ("1x16x32",)),
    "scalar_output": ("onnx", ()),
    "input_is_output": ("onnx", ()),
    "no_input": ("onnx", ()),
    "int64_bool_inputs": ("onnx", ()),
    "opset7": ("onnx", ()),
    "opset23": ("onnx", ()),
    **{name: ("torch", entry[5]) for name, entry in ARCHITECTURES.items()},
    "yolov8n": ("yolo", ()),
}
#: The two exporters of torch.onnx.export every torch model goes through: torch's default and the legacy one.
EXPORTERS = ("dynamo", "torchscript")
#: Models torch's default (dynamo) exporter cannot export (torch 2.13: "Cannot view a tensor with shape ... and
#: strides ..."): their TorchScript file gets every command. tests/matrix/test_matrix.py checks this set.
DYNAMO_EXPORT_FAILS = frozenset({"beit", "swin", "t5_encoder"})


def full_exporter(name: str) -> str:
    """The exporter whose file of ``name`` gets every command (the default one, where it exports the model)."""
    return EXPORTERS[1] if name in DYNAMO_EXPORT_FAILS else EXPORTERS[0]


#: The rows of the matrix: ``MODEL/EXPORTER`` for torch models, ``MODEL`` for the others.
ROWS = tuple(f"{name}/{e}" if kind == "torch" else name for name, (kind, _) in MODELS.items()
             for e in (EXPORTERS if kind == "torch" else ("",)))
#: Where ``make setup``'s ultralytics venv writes its YOLO ONNX files (tests/detect/export_yolo.py).
YOLO_MODELS = Path(__file__).resolve().parents[2] / ".venv-yolo" / "models"
#: Dynamic dims beyond the batch, fixed small for the matrix (``build --shapes``, calibration data).
SHAPES: dict[str, dict[str, tuple[int, ...]]] = {
    "ppocr_det": {"x": (1, 3, 64, 64)},
    "ppocr_rec": {"x": (1, 3, 48, 64)},
    "yolov8n": {"images": (1, 3, 320, 320)},
}


class ExportFailed(RuntimeError):
    """torch.onnx.export refused the model (a finding about the exporter: the row's ONNX cells are n/a)."""


def split_row(row: str) -> tuple[str, str]:
    """``("vit", "dynamo")`` from ``"vit/dynamo"``; ``("ppocr_det", "")`` from a row with one file."""
    name, _, exporter = row.partition("/")
    return name, exporter


def __getattr__(name: str):
    """``matrix_models:NAME`` for the table-made architectures (``trtforge coverage`` imports it so)."""
    if name in ARCHITECTURES:
        return lambda: build(name)
    raise AttributeError(name)


def _plain(model, key: str):
    import torch

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(*args)
            return out[key] if isinstance(key, str) else tuple(out[k] for k in key)

    torch.manual_seed(0)
    return Plain().eval()


def vit():
    import torch
    import transformers as T

    torch.manual_seed(0)
    return _plain(T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=64)), "last_hidden_state")


def deit():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.DeiTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, num_labels=10)
    return _plain(T.DeiTForImageClassificationWithTeacher(config), "logits")


def dinov2():
    import torch
    import transformers as T

    torch.manual_seed(0)
    return _plain(T.Dinov2Model(T.Dinov2Config(image_size=28, patch_size=7, hidden_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, mlp_ratio=2)), "pooler_output")


def swin():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                          num_labels=10)
    return _plain(T.SwinForImageClassification(config), "logits")


def convnext():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10, image_size=32)
    return _plain(T.ConvNextForImageClassification(config), "logits")


def segformer():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                               patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                               decoder_hidden_size=16, num_labels=4)
    return _plain(T.SegformerForSemanticSegmentation(config), "logits")


def detr():
    import torch
    import transformers as T

    torch.manual_seed(0)
    backbone = T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                              out_features=["stage2"])
    config = T.DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                          d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5,
                          num_labels=3)
    return _plain(T.DetrForObjectDetection(config), ("logits", "pred_boxes"))


def minilm():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=32)
    return _plain(T.BertModel(config), "last_hidden_state")


def whisper_encoder():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.WhisperConfig(num_mel_bins=16, d_model=16, encoder_layers=1, encoder_attention_heads=2,
                             encoder_ffn_dim=32, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=32,
                             max_source_positions=16, vocab_size=64, pad_token_id=0, bos_token_id=1,
                             eos_token_id=2, decoder_start_token_id=1)
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return _plain(WhisperEncoder(config), "last_hidden_state")


def example_inputs(name: str) -> tuple:
    """The example inputs of a torch model: ``MODELS[name]``'s shapes, random values (token ids < 64)."""
    return random_inputs(MODELS[name][1])


def random_inputs(shapes: tuple[str, ...]) -> tuple:
    """Seeded random tensors of ``--input-shape`` values (``int64:1x16``: token ids below 64)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    made = []
    for text in shapes:
        dtype, _, dims = text.rpartition(":")
        shape = tuple(int(d) for d in dims.split("x"))
        made.append(torch.randint(0, 64, shape, generator=generator) if dtype == "int64"
                    else torch.randn(shape, generator=generator))
    return tuple(made)


def _ppocr(which: str) -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("pip install rapidocr_onnxruntime==1.4.4 (make setup installs it with the zoo extra)")
    return Path(spec.origin).parent / "models" / f"ch_PP-OCRv4_{which}_infer.onnx"


def _odd(name: str):
    """The odd graphs, written with onnx.helper."""
    from onnx import TensorProto as P
    from onnx import helper as h
    from onnx import numpy_helper

    f = P.FLOAT
    x4 = h.make_tensor_value_info("x", f, [1, 4])
    if name == "scalar_output":
        nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0)]
        return h.make_graph(nodes, name, [x4], [h.make_tensor_value_info("s", f, [])]), 13
    if name == "input_is_output":
        nodes = [h.make_node("Relu", ["x"], ["y"])]
        return h.make_graph(nodes, name, [x4], [x4, h.make_tensor_value_info("y", f, [1, 4])]), 17
    if name == "no_input":
        const = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "c")
        nodes = [h.make_node("Constant", [], ["c"], value=const), h.make_node("Relu", ["c"], ["y"])]
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info("y", f, [1, 4])]), 17
    if name == "int64_bool_inputs":
        weight = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "table")
        nodes = [h.make_node("Gather", ["table", "ids"], ["emb"]),
                 h.make_node("Cast", ["mask"], ["maskf"], to=f),
                 h.make_node("Unsqueeze", ["maskf", "axis"], ["mask3"]),
                 h.make_node("Mul", ["emb", "mask3"], ["y"])]
        axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
        return h.make_graph(nodes, name, [h.make_tensor_value_info("ids", P.INT64, [1, 6]),
                                          h.make_tensor_value_info("mask", P.BOOL, [1, 6])],
                            [h.make_tensor_value_info("y", f, [1, 6, 4])], [weight, axis]), 17
    w = numpy_helper.from_array(np.linspace(-1, 1, 4 * 3 * 9, dtype=np.float32).reshape(4, 3, 3, 3), "w")
    image = h.make_tensor_value_info("image", f, [1, 3, 16, 16])
    nodes = [h.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    opset = {"opset7": 7, "opset23": 23}[name]
    inputs = [image, h.make_tensor_value_info("w", f, [4, 3, 3, 3])] if opset == 7 else [image]  # IR 3: listed
    graph = h.make_graph(nodes, name, inputs, [h.make_tensor_value_info("y", f, [1, 4, 16, 16])], [w])
    return graph, opset


def _export(name: str, exporter: str, path: Path) -> Path:
    """``name`` through torch.onnx.export with its example inputs (a static batch, as many exported models are):
    ``dynamo`` as torch's default exporter writes it (its opset, the weights in ``NAME.onnx.data``),
    ``torchscript`` at opset 17. Raises ExportFailed with the exporter's own reason."""
    import torch

    model = globals()[name]() if name in globals() else build(name)
    options = {"dynamo": True, "external_data": True} if exporter == "dynamo" else {"dynamo": False,
                                                                                    "opset_version": 17}
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the dynamo exporter's progress lines
            torch.onnx.export(model, example_inputs(name), str(path), **options)
    except Exception as exc:  # the exporter's refusal, whatever its type, is the finding
        cause = exc
        while cause.__cause__ is not None:
            cause = cause.__cause__
        reason = (str(cause).strip().splitlines() or [""])[0]
        raise ExportFailed(f"torch.onnx.export(dynamo={exporter == 'dynamo'}) fails: {type(cause).__name__}: "
                           f"{reason}"[:300]) from exc
    return path


def onnx_file(row: str, folder: Path) -> Path:
    """The ONNX file of ``row``: the wheel's file for PP-OCR, ``make setup``'s for YOLO, else written into ``folder``.

    Raises FileNotFoundError (a YOLO file not made) or ExportFailed (torch's exporter refused the model).
    """
    import onnx

    name, exporter = split_row(row)
    if name.startswith("ppocr_"):
        return _ppocr(name.removeprefix("ppocr_"))
    if MODELS[name][0] == "yolo":
        path = YOLO_MODELS / f"{name}.onnx"
        if not path.is_file():
            raise FileNotFoundError(f"no {path}: make setup's ultralytics venv writes it (make yolo-models)")
        return path
    path = Path(folder) / f"{name}.onnx"
    if MODELS[name][0] == "torch":
        return _export(name, exporter, path)
    from onnx import helper as h

    graph, opset = _odd(name)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 3 if opset == 7 else 10
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
