"""Tests of cpplan.cpsat."""
