"""Conformance runs: external test suites through ``trtforge.compile`` (see docs/conformance.md)."""
