"""The matrix's table-made architectures: transformers models from tiny configs (random weights, never downloaded)
and two plain-PyTorch conv nets, one entry each. Conv nets keep 32 or 64 channels where INT8 would apply: the
placement keeps a layer whose input channels are not a multiple of 32 in FP16, and an INT8 build that quantizes
nothing writes an FP16 artifact (the matrix's int8 cells would not run).

``ARCHITECTURES``: name → (family, model class, config class, config fields, output key(s), ``--input-shape``
values). ``build(name)`` makes the module; ``matrix_models`` exposes each as a factory ``matrix_models:NAME``
(what ``trtforge coverage`` and ``build --path direct`` import).

Example:
    >>> build("resnet")(*[__import__("torch").randn(1, 3, 32, 32)]).shape
    torch.Size([1, 10])
"""

from __future__ import annotations

_VIT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
_TEXT = {"vocab_size": 64, "max_position_embeddings": 32, **_VIT}
_IMAGE = ("1x3x32x32",)
_TOKENS = ("int64:1x16",)
_SEGFORMER_LIKE = {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [8, 16],
                   "patch_sizes": [7, 3], "strides": [4, 2], "num_attention_heads": [1, 2], "mlp_ratios": [2, 2]}

#: name → (family, model class, config class, config fields, output key(s), ``--input-shape`` values).
ARCHITECTURES: dict[str, tuple[str, str, str, dict, str | tuple[str, ...], tuple[str, ...]]] = {
    # vision: transformers, conv nets, hybrids
    "beit": ("vision", "BeitModel", "BeitConfig",
             {"image_size": 32, "patch_size": 8, "use_relative_position_bias": True, **_VIT}, "pooler_output", _IMAGE),
    "levit": ("vision", "LevitForImageClassification", "LevitConfig",
              {"image_size": 64, "patch_size": 16, "hidden_sizes": [16, 24], "num_attention_heads": [1, 2],
               "depths": [1, 1], "key_dim": [8, 8], "drop_path_rate": 0, "mlp_ratio": [2, 2],
               "attention_ratio": [2, 2], "down_ops": [["Subsample", 8, 1, 2, 2, 2]], "num_labels": 10},
              "logits", ("1x3x64x64",)),
    "mobilevit": ("vision", "MobileViTModel", "MobileViTConfig",
                  {"image_size": 32, "patch_size": 2, "hidden_sizes": [16, 24, 32],
                   "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 64], "num_attention_heads": 2}, "pooler_output", _IMAGE),
    "efficientnet": ("vision", "EfficientNetModel", "EfficientNetConfig",
                     {"image_size": 32, "width_coefficient": 0.1, "depth_coefficient": 0.1, "hidden_dim": 128},
                     "pooler_output", _IMAGE),
    "resnet": ("vision", "ResNetForImageClassification", "ResNetConfig",
               {"embedding_size": 32, "hidden_sizes": [32, 64], "depths": [1, 1], "layer_type": "bottleneck",
                "num_labels": 10}, "logits", _IMAGE),
    "regnet": ("vision", "RegNetModel", "RegNetConfig",
               {"embedding_size": 32, "hidden_sizes": [32, 64], "depths": [1, 1], "groups_width": 16},
               "pooler_output", _IMAGE),
    "poolformer": ("vision", "PoolFormerModel", "PoolFormerConfig",
                   {"hidden_sizes": [32, 64], "depths": [1, 1], "num_encoder_blocks": 2, "patch_sizes": [7, 3],
                    "strides": [4, 2], "padding": [2, 1], "pool_size": 3, "mlp_ratio": 2.0},
                   "last_hidden_state", _IMAGE),
    "swinv2": ("vision", "Swinv2ForImageClassification", "Swinv2Config",
               {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2],
                "window_size": 4, "num_labels": 10}, "logits", _IMAGE),
    "convnextv2": ("vision", "ConvNextV2Model", "ConvNextV2Config",
                   {"num_stages": 2, "hidden_sizes": [8, 16], "depths": [1, 1]}, "pooler_output", _IMAGE),
    "yolos": ("detection", "YolosForObjectDetection", "YolosConfig",
              {"image_size": [32, 32], "patch_size": 8, "num_detection_tokens": 5, "num_labels": 3, **_VIT},
              ("logits", "pred_boxes"), _IMAGE),
    "glpn": ("depth", "GLPNForDepthEstimation", "GLPNConfig",
             {**_SEGFORMER_LIKE, "decoder_hidden_size": 16}, "predicted_depth", _IMAGE),
    # multimodal encoders
    "clip_vision": ("multimodal", "CLIPVisionModel", "CLIPVisionConfig",
                    {"image_size": 32, "patch_size": 8, **_VIT}, "pooler_output", _IMAGE),
    "clip_text": ("multimodal", "CLIPTextModel", "CLIPTextConfig",
                  {**_TEXT, "max_position_embeddings": 16}, "pooler_output", _TOKENS),
    "siglip_vision": ("multimodal", "SiglipVisionModel", "SiglipVisionConfig",
                      {"image_size": 32, "patch_size": 8, **_VIT}, "pooler_output", _IMAGE),
    # text encoders
    "distilbert": ("text", "DistilBertModel", "DistilBertConfig",
                   {"vocab_size": 64, "dim": 32, "n_layers": 1, "n_heads": 2, "hidden_dim": 64,
                    "max_position_embeddings": 32}, "last_hidden_state", _TOKENS),
    "roberta": ("text", "RobertaModel", "RobertaConfig", {**_TEXT, "pad_token_id": 1, "max_position_embeddings": 34},
                "last_hidden_state", _TOKENS),
    "albert": ("text", "AlbertModel", "AlbertConfig", {"embedding_size": 16, **_TEXT}, "pooler_output", _TOKENS),
    "t5_encoder": ("text", "T5EncoderModel", "T5Config",
                   {"vocab_size": 64, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 1, "num_heads": 2,
                    "relative_attention_num_buckets": 8}, "last_hidden_state", _TOKENS),
    # audio and video
    "wav2vec2": ("audio", "Wav2Vec2Model", "Wav2Vec2Config",
                 {**_VIT, "conv_dim": (16, 16), "conv_stride": (5, 2), "conv_kernel": (10, 3),
                  "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2, "feat_extract_norm": "layer"},
                 "last_hidden_state", ("1x400",)),
    "ast": ("audio", "ASTModel", "ASTConfig",
            {**_VIT, "patch_size": 16, "frequency_stride": 8, "time_stride": 8, "num_mel_bins": 32,
             "max_length": 32}, "pooler_output", ("1x32x32",)),
    "videomae": ("video", "VideoMAEModel", "VideoMAEConfig",
                 {"image_size": 32, "patch_size": 8, "num_frames": 4, "tubelet_size": 2, **_VIT},
                 "last_hidden_state", ("1x4x3x32x32",)),
    # plain PyTorch
    "conv3d_net": ("video", "", "", {}, "", ("1x3x4x16x16",)),
    "ssd_head": ("detection", "", "", {}, "", _IMAGE),
}

#: name → {ModuleList path: how many of its layers to keep}, for a model whose config cannot make it shallower.
#: MobileViT's stages hold 2, 4 and 3 transformer layers and 3 inverted residuals, fixed in transformers: one
#: transformer layer each, and the stride-2 and a stride-1 (residual) block, keep every op kind; the dynamo export,
#: its costliest in the matrix (about 8 of a 14 CPU s row), traces a third of the layers.
DEPTHS: dict[str, dict[str, int]] = {
    "mobilevit": {"encoder.layer.1.layer": 2, "encoder.layer.2.transformer.layer": 1,
                  "encoder.layer.3.transformer.layer": 1, "encoder.layer.4.transformer.layer": 1},
}


def _conv3d_net():
    """A small 3-D conv classifier over a clip (N, C, T, H, W)."""
    from torch import nn

    return nn.Sequential(nn.Conv3d(3, 32, 3, padding=1), nn.BatchNorm3d(32), nn.ReLU(), nn.MaxPool3d((1, 2, 2)),
                         nn.Conv3d(32, 32, 3, stride=(1, 2, 2), padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
                         nn.Flatten(), nn.Linear(32, 5), nn.Softmax(dim=-1)).eval()


def _ssd_head():
    """An SSD-style detector: two feature maps, a box and a class head on each, flattened and joined."""
    import torch
    from torch import nn

    class SSDHead(nn.Module):
        def __init__(self, anchors: int = 3, classes: int = 4) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU6())
            self.down = nn.Sequential(nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
            self.boxes = nn.ModuleList([nn.Conv2d(32, anchors * 4, 3, padding=1) for _ in range(2)])
            self.scores = nn.ModuleList([nn.Conv2d(32, anchors * classes, 3, padding=1) for _ in range(2)])
            self.classes = classes

        def forward(self, x):
            maps = [self.stem(x)]
            maps.append(self.down(maps[0]))
            boxes = [b(m).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 4) for b, m in zip(self.boxes, maps, strict=True)]
            scores = [s(m).permute(0, 2, 3, 1).reshape(x.shape[0], -1, self.classes)
                      for s, m in zip(self.scores, maps, strict=True)]
            return torch.cat(boxes, 1), torch.cat(scores, 1).softmax(-1)

    return SSDHead().eval()


def build(name: str):
    """The module of ``name`` (seeded: the same weights every time), outputs as a tensor or a tuple."""
    import torch

    torch.manual_seed(0)
    if name == "conv3d_net":
        return _conv3d_net()
    if name == "ssd_head":
        return _ssd_head()
    import transformers as T

    _, model_class, config_class, fields, key, _ = ARCHITECTURES[name]
    model = getattr(T, model_class)(getattr(T, config_class)(**fields))
    for path, keep in DEPTHS.get(name, {}).items():
        layers = model.get_submodule(path)
        del layers[keep:]
    from matrix_models import _plain

    return _plain(model, key)
