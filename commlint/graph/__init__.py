"""The checker: execution graph → matched communications → wait-for graph → cycles (dl2)."""

from commlint.graph.check import TraceCheck, check_trace
from commlint.graph.compile import MODELS

__all__ = ["MODELS", "TraceCheck", "check_trace"]
