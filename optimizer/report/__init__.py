"""Rendering only: terminal tables, JSON, CSV, plots and the generated scenario reference."""
