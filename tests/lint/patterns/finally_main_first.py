import contextlib

import torch.distributed as dist


@contextlib.contextmanager
def main_process_first(is_main_process):
    # transformers' TrainingArguments.main_process_first: one barrier on every rank
    try:
        if not is_main_process:
            dist.barrier()  # the others wait for the main process
        yield
    finally:
        if is_main_process:
            dist.barrier()  # the main process releases them, also when its work raised
