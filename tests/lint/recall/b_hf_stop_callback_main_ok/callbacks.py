"""Training callbacks."""
from __future__ import annotations

import logging

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class StepBudgetCallback(TrainerCallback):
    """Stops training once a step budget is used up, and reports it once."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.max_steps:
            if state.is_world_process_zero:
                logger.info("step budget reached at step %d", state.global_step)
            control.should_training_stop = True
        return control
