"""Broken: two pipeline stages both send their activation first, then receive."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
peer = 1 - rank
act = torch.ones(1024)
grad = torch.empty(1024)
dist.send(act, dst=peer)
dist.recv(grad, src=peer)
dist.destroy_process_group()
