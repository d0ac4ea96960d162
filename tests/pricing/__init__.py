"""Tests of cpplan.pricing."""
