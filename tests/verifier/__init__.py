"""Tests of cpplan.verifier."""
