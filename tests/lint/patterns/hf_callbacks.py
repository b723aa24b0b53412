import torch
import torch.distributed as dist
from transformers import TrainerCallback


class SyncMetrics(TrainerCallback):
    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if state.is_world_process_zero:
            t = torch.tensor([metrics["eval_loss"]])
            dist.all_reduce(t)
            print(t)


class Saver(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        trainer = kwargs["trainer"]
        if trainer.is_world_process_zero():
            dist.barrier()
