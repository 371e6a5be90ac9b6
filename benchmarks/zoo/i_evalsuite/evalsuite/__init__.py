"""Offline evaluation helpers for the sensor-activity classifier."""
