"""cpplan inside TRL: :class:`GRPOTrainer`, ``trl.GRPOTrainer`` with packed log-prob passes."""

from cpplan.integrations.trl.grpo_trainer import GRPOTrainer, StepTokens, padded_rows

__all__ = ["GRPOTrainer", "StepTokens", "padded_rows"]
