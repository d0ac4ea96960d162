"""Tests of cpplan.runtime."""
