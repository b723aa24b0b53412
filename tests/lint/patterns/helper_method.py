import torch
import torch.distributed as dist

def is_main_process():
    return dist.get_rank() == 0

class Tracker:
    def __init__(self):
        self.total = torch.zeros(1)

    def reduce_mean(self, t):
        dist.all_reduce(t)
        return t / dist.get_world_size()

    def log_epoch(self):
        print(self.reduce_mean(self.total))

def train(tracker):
    if is_main_process():
        tracker.log_epoch()
