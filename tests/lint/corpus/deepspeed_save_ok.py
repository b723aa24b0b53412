"""DeepSpeed: every rank calls save_checkpoint; rank 0 writes a note."""

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
        if step % args.save_every == 0:
            model_engine.save_checkpoint(args.ckpt_dir, tag=f"step{step}")
            if dist.get_rank() == 0:
                print(f"saved step {step}")
