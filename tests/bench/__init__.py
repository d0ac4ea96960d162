"""Tests of cpplan.bench."""
