"""Measure before you commit: calibration overlays fitted to measurements, and the probe that makes them."""
