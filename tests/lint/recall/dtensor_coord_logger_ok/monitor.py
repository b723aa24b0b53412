"""Weight statistics for a 2-D (dp, tp) run."""
import logging

import torch

log = logging.getLogger("monitor")


class WeightMonitor:
    """Logs the norm of full weights from one process per tensor-parallel group."""

    def __init__(self, mesh, every=1):
        self.mesh = mesh
        self.every = every
        self.coord = mesh.get_coordinate()

    def is_reporter(self):
        return self.coord[0] == 0

    def maybe_log(self, step, params):
        if step % self.every != 0:
            return
        if self.is_reporter():
            for name, p in params.items():
                full = p.full_tensor()
                log.info("step %d %s norm %.4f", step, name, full.norm().item())
