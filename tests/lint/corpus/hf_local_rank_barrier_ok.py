"""Hugging Face example style: the first process prepares the dataset, the others wait."""

import torch.distributed


def load_and_cache_examples(args, tokenizer, build):
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()
    dataset = build(args.data_dir, tokenizer)
    if args.local_rank == 0:
        torch.distributed.barrier()
    return dataset
