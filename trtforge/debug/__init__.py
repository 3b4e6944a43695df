"""Verify and debug engines: ``doctor`` (can it run here?), ``check`` (does it answer right?),
``compare`` (two models, output by output or layer by layer), precision bisection and ONNX inspection.

Each module is imported where it is used; this package imports nothing heavy at import time.

Example:
    >>> from trtforge.debug.doctor import gather_facts, verdicts
    >>> verdicts(gather_facts())[0].line
    'no CUDA GPU found: TensorRT engines cannot run here; ...'
"""
