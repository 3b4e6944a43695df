"""Measuring: timing (``timing.measure``), the route sweep behind ``trtforge bench`` (``routes``), and the load
generator and null model for serving (``serving``). The scripts that use it are in ``bench/`` at the repo root."""
