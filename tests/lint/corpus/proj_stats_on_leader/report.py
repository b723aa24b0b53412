import comm_tools


class EpochReport:
    def __init__(self):
        self.rows = []

    def close_epoch(self, epoch, loss_sum, steps):
        mean = comm_tools.averaged(loss_sum / max(steps, 1))
        self.rows.append((epoch, float(mean)))
