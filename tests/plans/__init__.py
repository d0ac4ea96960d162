"""Tests of cpplan.plans."""
