"""Quantization methods: each a pass (``name``, ``applies``, ``stage``, ``run``) in one ordered list."""
