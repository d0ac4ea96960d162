"""Tests of cpplan.calibration."""
