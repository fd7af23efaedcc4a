"""Tests of the charts' framework scripts (scripts/<framework>/), run for real on CPU with tiny local models."""
