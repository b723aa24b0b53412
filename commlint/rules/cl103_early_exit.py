"""CL103: a rank- or data-dependent return/break/continue/exit skips a collective."""

from commlint.lint.perrank_check import branch_findings
from commlint.rules import Rule


def check(program):
    # the per-rank evaluation sees a rank-local value's test through objects and helpers the
    # taint rules do not follow; one finding per cause (the taint one, when both see it)
    from commlint.lint.loop_signals import program_findings
    from commlint.lint.perrank_check import perrank_findings

    found = [f for f in branch_findings(program) if f.code == "CL103"]
    # a framework's loop stopped by a hook on some ranks (`trainer.should_stop = True`)
    return found + perrank_findings(program, "CL103") + program_findings(program)


RULE = Rule(
    code="CL103",
    name="early-exit-before-collective",
    summary="Some ranks leave (return, break, continue, sys.exit) before a collective that "
    "the others still call.",
    explanation="""
An early exit under a condition that differs between ranks is a branch in disguise: the ranks
that take it skip every collective that follows, up to the end of the function (`return`) or
of the loop (`break`, `continue`). Typical cases: `if rank != 0: return` before a barrier, a
data-dependent `break` out of the training loop ("loss is NaN", "time budget spent",
"iterator exhausted" — `except StopIteration: break` with shards of different lengths) before
the epoch's all-reduce, and `sys.exit(0)` on the workers — also inside a helper called before
the collective (the call chain is shown).

A module wrapped by FSDP (`fully_shard`, `FullyShardedDataParallel`) communicates when it is
called: its forward all-gathers the parameters, its backward reduce-scatters the gradients. The
linter follows the module wherever it goes — returned by the helper that built and sharded it
(each block in a loop, then the root), sharded in place by a helper it was handed to
(`apply_fsdp(model)`), passed as a parameter to `train(model, ...)` or to a `Trainer`'s
constructor — so a `continue` on rank 0, or on this rank's own data (`torch.isnan(x).any()`,
`loss.item() > 10`), before `model(x)` is reported.

A framework's training loop is left the same way from a hook: Lightning stops `Trainer.fit`
on a rank that sets `self.trainer.should_stop = True`, and ends the epoch on a rank whose
LightningModule's `on_train_batch_start` returns -1; transformers stops `Trainer.train` on a
rank whose callback sets `control.should_training_stop` (or `should_epoch_stop`). Neither
framework agrees on the signal across ranks, and every step of its loop reduces gradients: a
signal under a test of the rank (`state.is_world_process_zero`) or of this rank's own data (a
validation loss averaged over the rank's shard, a count kept in `self.` from the rank's
batches) stops those ranks while the others wait in the next step. A value that went through
`strategy.reduce`, `all_gather` or `dist.all_reduce` is the same on every rank: not reported.

`raise` is not reported: an exception ends the rank, and the launcher (torchrun) then stops
every rank — a crash, which is what you want instead of a hang. Catching it and carrying on is
what turns it into a hang (see CL104).
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Agree on the exit before taking it: all-reduce a stop flag (op=MAX) so every rank leaves in the
same iteration, or move the exit after the communication.
""",
    invalid=(
        """
import torch.distributed as dist

def finish(t):
    if dist.get_rank() != 0:
        return
    print("rank 0 done")
    dist.barrier()
""",
        """
import time
import torch.distributed as dist

def train(loader, grads, deadline):
    for batch in loader:
        if time.time() > deadline:
            break
        dist.all_reduce(grads)
""",
        """
import torch.distributed as dist

def train(model, loader, grads):
    for batch in loader:
        dist.all_reduce(grads)
        loss = model(batch).mean()
        if loss.item() < 0.01:
            break
""",
        """
import torch
import torch.distributed as dist

def train(model, loader):
    for batch in loader:
        try:
            model(batch).sum().backward()
        except torch.cuda.OutOfMemoryError:
            continue
        for p in model.parameters():
            dist.all_reduce(p.grad)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def build(blocks):
    model = torch.nn.Sequential(*blocks)
    for block in model:
        fully_shard(block)
    fully_shard(model)
    return model

def train(model, loader, opt):
    for x, y in loader:
        if dist.get_rank() == 0:
            continue  # expect: CL103
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

def main(blocks, loader, opt):
    train(build(blocks), loader, opt)
""",
        """
import lightning as L
import torch


class Regressor(L.LightningModule):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.losses.append(torch.nn.functional.mse_loss(self(x), y))

    def on_validation_epoch_end(self):
        avg = torch.stack(self.losses).mean()
        if avg > 50.0:
            self.trainer.should_stop = True
""",
    ),
    valid=(
        """
import torch.distributed as dist

def finish(t):
    dist.barrier()
    if dist.get_rank() != 0:
        return
    print("rank 0 done")
""",
        """
import time
import torch
import torch.distributed as dist

def train(loader, grads, deadline):
    for batch in loader:
        stop = torch.tensor(float(time.time() > deadline))
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
        dist.all_reduce(grads)
""",
        """
import torch
import torch.distributed as dist

def train(model, loader, grads):
    for batch in loader:
        dist.all_reduce(grads)
        loss = model(batch).mean().detach()
        dist.all_reduce(loss, op=dist.ReduceOp.MAX)
        if loss.item() < 0.01:
            break
""",
        """
import torch
import torch.distributed as dist

def train(model, loader):
    for batch in loader:
        failed = torch.zeros(1)
        try:
            model(batch).sum().backward()
        except torch.cuda.OutOfMemoryError:
            failed.fill_(1)
        dist.all_reduce(failed, op=dist.ReduceOp.MAX)
        if failed.item():
            model.zero_grad()
            continue
        for p in model.parameters():
            dist.all_reduce(p.grad)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def build(blocks):
    model = torch.nn.Sequential(*blocks)
    for block in model:
        fully_shard(block)
    fully_shard(model)
    return model

def train(model, loader, opt):
    for x, y in loader:
        skip = torch.isnan(x).any().float()
        dist.all_reduce(skip, op=dist.ReduceOp.MAX)  # every rank skips together
        if skip.item():
            continue
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

def main(blocks, loader, opt):
    train(build(blocks), loader, opt)
""",
        """
import lightning as L
import torch


class Regressor(L.LightningModule):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.losses.append(torch.nn.functional.mse_loss(self(x), y))

    def on_validation_epoch_end(self):
        avg = torch.stack(self.losses).mean()
        avg = self.trainer.strategy.reduce(avg, reduce_op="mean")
        if avg > 50.0:
            self.trainer.should_stop = True
""",
    ),
)
