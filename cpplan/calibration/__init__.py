"""Measured peaks in, calibrated card coefficients out: the measurement harness of ``cpplan measure``
(:mod:`cpplan.calibration.measure`, above the executors), the fits and the online correction."""
