"""Quantization methods, each a pass (``trtforge.quantize.method.Method``) in one ordered list: ``METHODS``.

The driver (``trtforge.quantize.driver.run_stage``) runs, at each stage of the flow, the methods of that stage in
this order. A new method is one module here (its work and its ``METHOD``) and one entry below.
"""

from __future__ import annotations

from trtforge.quantize.method import Method
from trtforge.quantize.methods import adaround, awq, bias_correction, equalize, finetune, gptq, smoothquant

#: In the order they run (the driver keeps each stage's methods in this order).
METHODS: tuple[Method, ...] = (
    smoothquant.METHOD,
    equalize.METHOD,
    adaround.METHOD,
    awq.METHOD,
    gptq.METHOD,
    bias_correction.METHOD,
    finetune.METHOD,
)
