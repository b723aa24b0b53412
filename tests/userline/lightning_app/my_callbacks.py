import lightning as L
import torch.distributed as dist


class Rank0Barrier(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            dist.barrier()
