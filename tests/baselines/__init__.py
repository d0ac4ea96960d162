"""Tests of cpplan.baselines."""
