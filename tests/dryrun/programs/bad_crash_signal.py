"""Broken: rank 1 dies by a signal (a segfault in native code) while rank 0 waits for it."""

import ctypes

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    ctypes.string_at(0)  # segfault
dist.all_reduce(torch.ones(4))
