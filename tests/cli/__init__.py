"""Tests of cpplan.cli."""
