"""Parametric noise-spectrum fitting for multi-channel sensor recordings."""
