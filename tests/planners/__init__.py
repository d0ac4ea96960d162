"""Tests of cpplan.planners."""
