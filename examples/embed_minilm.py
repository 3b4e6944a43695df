"""Tutorial: embed sentences with all-MiniLM-L6-v2 (real weights, offline) as an FP16 engine.

FP16 keeps the attention mask's -3.4e38 and the LayerNorms in FP32 (the sidecar says why); the FP16
graph's embeddings are compared with PyTorch's by cosine similarity.

    python examples/embed_minilm.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np
import torch

import trtforge
from trtforge.core.ort_session import session
from trtforge.zoo import minilm_l6

out = Path(sys.argv[1] if len(sys.argv) > 1 else "trtforge_out/examples")
model, tokenize = minilm_l6()
example = tokenize(["a photo of a cat", "espresso"], seq_len=32)  # forward's keyword arguments
art = trtforge.compile(model, example, precision="fp16", batch=(1, 4, 8), output_dir=out)
print(f"built: {art.engine_path.name}, output {art.sidecar.outputs[0].name} {list(art.sidecar.outputs[0].shape)}")
print(f"nodes kept in FP32: {len(art.sidecar.precision.fp32_nodes) > 0}")

texts = ["The engine runs on the GPU.", "A TensorRT plan is built once.", "Cats sleep most of the day.",
         "An espresso is a small strong coffee."]
batch = tokenize(texts, seq_len=32)
with torch.no_grad():
    reference = model(**batch).numpy()
fp16 = session(art.onnx_path).run(None, {k: v.numpy() for k, v in batch.items()})[0]
cosine = (fp16 * reference).sum(1) / np.linalg.norm(fp16, axis=1) / np.linalg.norm(reference, axis=1)
print(f"cosine to PyTorch, worst of {len(texts)}: {cosine.min():.3f}")
print(f"nearest to sentence 0: sentence {int(np.argsort(-(fp16 @ fp16[0]))[1])}")
