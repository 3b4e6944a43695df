"""Tutorial: bring your own ONNX file: inspect it, build it with --shapes for its dynamic dims, check it.

The file here is a small segmentation-style network exported with a dynamic batch, height and width
(any ONNX file goes the same way). Each step is the `trtforge` command a user would type.

    python examples/bring_your_own_onnx.py [OUTPUT_DIR]
"""

import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

out = Path(sys.argv[1] if len(sys.argv) > 1 else "trtforge_out/examples")
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                    nn.Conv2d(16, 4, 1)).eval()
torch.onnx.export(net, (torch.zeros(1, 3, 64, 64),), out / "segmenter.onnx", input_names=["image"], output_names=["mask"],
                  dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}}, dynamo=False)


def trtforge(*args: str) -> list[str]:
    """Run one `trtforge` command in the output folder, as in a shell; its output's lines."""
    done = subprocess.run([sys.executable, "-m", "trtforge.cli", *args], capture_output=True, text=True, cwd=out)
    print(f"$ trtforge {' '.join(args)}  -> exit {done.returncode}")
    return (done.stdout + done.stderr).splitlines()


# 1. What is in the file: I/O with their dynamic dims, ops, and what the parser would refuse.
lines = trtforge("inspect", "segmenter.onnx")
row = next(line for line in lines if "image" in line and "float32" in line)
print("  ".join(cell.strip() for cell in row.split("│") if cell.strip()))

# 2. A build without shapes for height and width is refused in one line, before any work.
print(trtforge("build", "segmenter.onnx", "-o", ".")[-1].split(";")[0])

# 3. With --shapes NAME:MIN:OPT:MAX (dims joined by x) the engine serves 1..4 images of 32..128 px.
trtforge("build", "segmenter.onnx", "--precision", "fp16", "--shapes", "image:1x3x32x32:2x3x64x64:4x3x128x128",
         "-o", ".")
print(f"wrote {sorted(p.name for p in out.glob('segmenter*'))}")

# 4. Check the build against its FP32 reference graph (the onnxruntime route runs anywhere; on a GPU
#    use --route tensorrt).
lines = trtforge("check", "segmenter_fp16.json", "--route", "onnxruntime", "--samples", "4")
print(next(line.strip() for line in lines if "PASS" in line or "FAIL" in line))
