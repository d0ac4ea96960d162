"""Tests of cpplan.spec."""
