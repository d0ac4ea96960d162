"""Measured peaks in, calibrated card coefficients out."""
