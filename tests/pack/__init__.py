"""Tests of cpplan.pack."""
