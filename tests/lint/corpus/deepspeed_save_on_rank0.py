"""DeepSpeed: save_checkpoint called from rank 0 only (it is a collective)."""

import deepspeed
import torch.distributed as dist


def main(args, model, dataset):
    model_engine, optimizer, loader, _ = deepspeed.initialize(
        args=args, model=model, training_data=dataset
    )
    for step, batch in enumerate(loader):
        loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
        if step % args.save_every == 0 and dist.get_rank() == 0:
            model_engine.save_checkpoint(args.ckpt_dir, tag=f"step{step}")  # expect: CL101
