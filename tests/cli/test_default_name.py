"""The default artifact name (issue 35, item 14): a factory's name on the command line, a module's class in snake
case in Python, one naming function (``pipeline.paths.default_name``) for the ONNX and the direct path."""

from __future__ import annotations

import torch
from cli_in_process import run

from trtforge.pipeline import default_name

FACTORY = '''
import torch


class Plain(torch.nn.Module):
    """A wrapper, as a user writes around a library model (the matrix's transformers models are wrapped so)."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())

    def forward(self, x):
        return self.model(x)


def regnet():
    torch.manual_seed(0)
    return Plain().eval()

'''


def test_cli_names_a_direct_build_after_its_factory(tmp_path):
    """``build pkg:regnet --path direct``: ``regnet_fp16.*``, not the wrapper class's ``plain_fp16.*``."""
    (tmp_path / "d2_regnets.py").write_text(FACTORY)
    done = run(["build", "d2_regnets:regnet", "--path", "direct", "--input-shape", "1x3x8x8", "--opt-level", "0",
                "-o", tmp_path / "out", "-q"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["regnet_fp16.engine", "regnet_fp16.json"]


class MLPHead(torch.nn.Module):
    def forward(self, x):
        return x


class RegNetModel(MLPHead):
    pass


def test_python_names_a_module_after_its_class_in_snake_case():
    assert default_name(MLPHead()) == "mlp_head"  # was m_l_p_head
    assert default_name(RegNetModel()) == "reg_net_model"
    made = RegNetModel()
    made.trtforge_factory = "models.vision:make_regnet_small"  # what `trtforge build` sets: the factory names it
    assert default_name(made) == "regnet_small"
    made.trtforge_name = "regnet"  # a model's own name wins
    assert default_name(made) == "regnet"


def test_snake_case_keeps_acronyms_whole():
    """Acronyms stay one word (``ViTModel`` gave ``vi_t_model``); a version glued to an acronym stays glued."""
    from trtforge.pipeline.paths import snake_case

    names = ["ViTModel", "MLPHead", "RegNetModel", "BERTEncoder", "YOLOv8", "MobileViT", "DeiTModel",
             "CLIPTextModel", "GPT2Model", "ViTForImageClassification", "regnet"]
    assert [snake_case(name) for name in names] == [
        "vit_model", "mlp_head", "reg_net_model", "bert_encoder", "yolov8", "mobile_vit", "deit_model",
        "clip_text_model", "gpt2_model", "vit_for_image_classification", "regnet"]
