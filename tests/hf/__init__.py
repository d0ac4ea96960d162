"""Tests of cpplan.hf: planned waves on transformers models, exact against the unpacked run."""
