"""The independent verifier: re-checks a plan in its JSON form token by token, sharing no code with the
evaluator beyond the card."""

from cpplan.verifier.plan_check import Verification, verify_plan

__all__ = ["Verification", "verify_plan"]
