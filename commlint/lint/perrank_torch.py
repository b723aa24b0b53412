"""The torch API in the per-rank interpreter (`perrank.Rank`): `torch.distributed` calls
(collectives, point-to-point, batches, groups, works), pipelining schedules, and the
recording of each communication action with its site and payload.
"""

from __future__ import annotations

import ast

from commlint.lint import perrank_layers as layers
from commlint.lint import perrank_values as values
from commlint.lint.perrank_builtins import _numel, _torch_call
from commlint.lint.perrank_mesh import DTENSOR, PLACEMENTS, DTensorVal, Placement
from commlint.lint.perrank_model import (
    MAX_ACTIONS,
    OP_NAMES,
    P2P,
    PAYLOAD,
    RANK_TRUE_ZERO,
    TRACE_OPS,
    UNK,
    Abort,
    ExitStack,
    Fn,
    Group,
    Mod,
    Stop,
    Tensor,
    Unknown,
    Work,
    _arg,
    _arg_text,
    _argspec,
    _int_list,
    _is_known,
    guard,
)
from commlint.lint.perrank_pipelining import (
    MULTI,
    SINGLE,
    Schedule,
    ScheduleMethod,
    Stage,
    step_actions,
)


class TorchApi:
    """`Rank`'s torch API calls and the recording of its communication."""

    # ------------------------------------------------------------------ the torch API
    def call_api(self, qname: str, args: list, kwargs: dict, e: ast.Call) -> object:
        table = self.ev.table
        name = table.canonical(qname)
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.distributed.pipelining"):
            return self.pipelining(last, args, kwargs, e)
        if name == "torch.compile" and args:
            return args[0]  # the same module, compiled: it communicates as it did
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") and (
            args and isinstance(args[0], DTensorVal)
        ):
            return args[0]  # a Parameter of a DTensor is that DTensor (mesh, placements)
        if last in PLACEMENTS and name.startswith(
            ("torch.distributed.tensor", "torch.distributed._tensor")
        ):
            return Placement(last)
        if name == "init_device_mesh":
            return self.init_mesh(args, kwargs, e)
        if name.endswith("DeviceMesh.from_group"):
            return self.mesh_from_group(args, kwargs, e)
        if table.constructor(qname) == DTENSOR:
            return self.make_dtensor(args, kwargs, e.lineno)
        if name.startswith("torch.distributed.") or name.startswith("deepspeed.comm"):
            if last == "get_rank":
                self.ev.rank_read = True
                g = _arg(args, kwargs, 0, "group")
                if isinstance(g, Group):
                    return g.members.index(self.rank) if self.rank in g.members else -1
                if g is None or (isinstance(g, Unknown) and self.ev.symbolic):
                    return self.rank
                return UNK
            if last == "get_world_size":
                g = _arg(args, kwargs, 0, "group")
                if isinstance(g, Group):
                    return len(g.members)
                if g is None or (isinstance(g, Unknown) and self.ev.symbolic):
                    return self.world
                return UNK
            if last in ("is_initialized", "is_available", "is_torchelastic_launched"):
                return True
            if last in ("init_process_group", "destroy_process_group"):
                return None
            if last == "get_backend":
                return "gloo"
            if last == "new_group":
                return self.new_group(args, kwargs, e)
            if last in ("new_subgroups", "new_subgroups_by_enumeration"):
                return self.new_subgroups(last, args, kwargs, e)
            if last == "get_global_rank":
                g, r = _arg(args, kwargs, 0, "group"), _arg(args, kwargs, 1, "group_rank")
                if isinstance(g, Group) and isinstance(r, int) and 0 <= r < len(g.members):
                    return g.members[r]
                if isinstance(g, Unknown) and self.ev.symbolic and isinstance(r, int):
                    return r
                return UNK
            if last == "P2POp":
                op = args[0] if args else kwargs.get("op")
                opname = op.qname.rsplit(".", 1)[-1] if isinstance(op, Mod) else None
                if opname not in ("isend", "irecv"):
                    raise Abort("a P2POp whose operation is unknown", e.lineno)
                return P2P(
                    opname,
                    _arg(args, kwargs, 1, "tensor"),
                    _arg(args, kwargs, 2, "peer"),
                    _arg(args, kwargs, 3, "group"),
                    _arg(args, kwargs, 4, "tag") or 0,
                )
            if last == "batch_isend_irecv":
                return self.batch(_arg(args, kwargs, 0, "p2p_op_list"), e)
        if name in ("contextlib.ExitStack", "contextlib.AsyncExitStack"):
            return ExitStack()
        if name.startswith(
            ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
        ):
            fn = _arg(args, kwargs, 0, "fn")
            extra = _arg(args, kwargs, 1, "args") or ()
            if isinstance(fn, Fn) and isinstance(extra, tuple | list):
                return self.call_fn(fn, [self.rank, *extra], {}, e)
            return self.opaque(e)
        if name.startswith("torch.distributed.checkpoint.state_dict."):
            got = self.state_dict_call(last, args, kwargs, e)
            if got is not None:
                return got
        wrapper = table.wrapper(qname)
        if wrapper is not None:
            return self.wrap_module(wrapper, args, kwargs, e)
        fact = table.call(qname)
        if fact is not None and fact.kind in ("collective", "send", "recv") and not fact.functional:
            return self.communicate(fact, args, kwargs, e)
        if fact is not None:
            return self.opaque(e)
        if values.seed(self, name, args, kwargs):
            return UNK
        data = values.data_call(self, name, args, kwargs, e.lineno)
        if data is not NotImplemented:
            return data
        layer = layers.build_layer(name, args, kwargs)
        if layer is not None:
            return layer
        if name.startswith("torch.") and not name.startswith("torch.distributed"):
            return _torch_call(name, last, args, kwargs)
        if name in ("os.getenv", "os.environ.get") and args:
            v = self.env_var(args[0])
            return v if v is not UNK else (args[1] if len(args) > 1 else UNK)
        if name in ("sys.exit", "os._exit", "exit", "quit"):
            raise Stop("exit", e.lineno)
        if last in RANK_TRUE_ZERO and name not in self.ev.defined:
            self.ev.rank_read = True
            return self.rank == 0
        if last in ("get_local_rank", "get_global_rank", "get_node_local_rank"):
            self.ev.rank_read = True
            return self.rank
        if name in ("time.time", "time.perf_counter", "time.monotonic"):
            return UNK
        if name == "argparse.ArgumentParser":
            return values.ArgParser()

        if name.startswith(("math.",)):
            import math

            f = getattr(math, last, None)
            if f is not None and all(_is_known(a) for a in args):
                try:
                    return f(*args)
                except Exception:
                    return UNK
        return self.opaque(e)

    def new_group(self, args: list, kwargs: dict, e: ast.Call) -> object:
        ranks = _arg(args, kwargs, 0, "ranks")
        if ranks is None:
            members: tuple[int, ...] = tuple(range(self.world))
        elif isinstance(ranks, list | tuple | range) and all(isinstance(r, int) for r in ranks):
            members = tuple(sorted(set(ranks)))
        else:
            raise Abort("a group whose members this rank cannot know", e.lineno)
        if any(r < 0 or r >= self.world for r in members):
            raise Stop("exception", e.lineno, "ValueError")
        k = len(self.groups)
        g = Group(f"g{k}", members)
        self.groups.append(g)
        local = _arg(args, kwargs, 4, "use_local_synchronization")
        if local is not True:
            self.ev.note_creation(self, k, members, *self.local_site(e.lineno))
        return g

    def local_site(self, line: int) -> tuple[int, str]:
        """The evaluated file's line that leads to `line` of the code running now (itself,
        or the call into the followed file that runs it), and where that code is when it is
        another file's (`groups.py:14`), for the message."""
        if self.cur is self.ev:
            return line, ""
        for _fn, short, at in reversed(self.stack):
            if short == self.ev.short:
                return at, self.site(line)
        return line, ""  # a followed module's top level, run by an import

    def new_subgroups(self, last: str, args: list, kwargs: dict, e: ast.Call) -> object:
        """`new_subgroups(group_size)` / `new_subgroups_by_enumeration(ranks_lists)`: one
        `new_group` per list, in list order, on every rank (each is collective over the
        world); `(this rank's subgroup or None, all of them)`, as torch returns."""
        if last == "new_subgroups":
            size = _arg(args, kwargs, 0, "group_size")
            if size is None:
                # torch takes the CUDA device count, which the source does not say
                raise Abort("subgroups of a size this rank cannot know", e.lineno)
            if not isinstance(size, int):
                raise Abort("subgroups of a size this rank cannot know", e.lineno)
            base = self.group_of(_arg(args, kwargs, 1, "group"), e.lineno).members
            if size <= 0 or size > len(base) or len(base) % size:
                raise Stop("exception", e.lineno, "ValueError")
            lists: object = [list(base[i : i + size]) for i in range(0, len(base), size)]
        else:
            lists = _arg(args, kwargs, 0, "ranks_per_subgroup_list")
        if not isinstance(lists, list | tuple) or not lists:
            if isinstance(lists, list | tuple):
                raise Stop("exception", e.lineno, "ValueError")
            raise Abort("subgroups whose members this rank cannot know", e.lineno)
        mine = None
        groups = []
        seen: set[int] = set()
        for ranks in lists:
            g = self.new_group([ranks], {}, e)
            groups.append(g)
            if seen & set(g.members):
                raise Stop("exception", e.lineno, "ValueError")  # a rank in two subgroups
            seen |= set(g.members)
            if self.rank in g.members:
                mine = g
        return (mine, groups)

    def pipelining(self, last: str, args: list, kwargs: dict, e: ast.Call) -> object:
        """A pipeline stage or schedule (see `perrank_pipelining`)."""
        if last == "PipelineStage":
            index = _arg(args, kwargs, 1, "stage_index")
            num = _arg(args, kwargs, 2, "num_stages")
            if not isinstance(index, int) or not isinstance(num, int):
                raise Abort("a pipeline stage whose index this rank cannot know", e.lineno)
            group = self.group_of(_arg(args, kwargs, 8, "group"), e.lineno)
            if not 0 <= index < num:
                raise Stop("exception", e.lineno, "ValueError")  # torch refuses it
            if num != len(group.members):
                raise Abort("a pipeline of several stages per rank", e.lineno)
            shapes = _arg(args, kwargs, 4, "input_args") not in (None, UNK)
            return Stage(index, num, group.members, group.name, shapes)
        if last in SINGLE:
            stage = _arg(args, kwargs, 0, "stage")
            n = _arg(args, kwargs, 1, "n_microbatches")
            if not isinstance(stage, Stage) or not isinstance(n, int) or n < 1:
                raise Abort("a pipeline schedule this rank cannot know", e.lineno)
            return Schedule(last, stage, n)
        if last in MULTI:
            raise Abort("a pipeline schedule of several stages per rank", e.lineno)
        return self.opaque(e)

    def schedule_call(self, m: ScheduleMethod, e: ast.Call, kwargs: dict) -> object:
        if m.attr not in ("step", "eval"):
            return UNK
        losses = kwargs.get("losses")
        st = m.schedule.stage
        if isinstance(losses, list) and st.index == st.num_stages - 1:
            # the last stage appends each microbatch's loss: computed from its own data (the
            # targets and what the stages before it sent), known to this stage alone
            guard(losses)
            fps = self.ev.fps
            target = values.fp_of(self, kwargs.get("target"), e.lineno)
            for k in range(m.schedule.n_microbatches):
                fp = fps.node(e.lineno, ("pipeline loss", st.index, k), (target,))
                fps.data.add(fp)
                losses.append(Tensor((), "float32", fp=fp))

        def new_handle() -> str:
            self.handle_count += 1
            return f"h{self.handle_count - 1}"

        for action in step_actions(m.schedule, new_handle, backward=m.attr == "step"):
            self.record(action, e.lineno)
        return UNK

    def site(self, line: int) -> str:
        return f"{self.cur.short}:{line}"

    def group_of(self, g: object, line: int, text: str | None = None) -> Group:
        if g is None:
            return Group("WORLD", tuple(range(self.world)))
        if isinstance(g, Group):
            return g
        if isinstance(g, Unknown) and text and self.ev.symbolic:
            # a method's own group (`self.process_group`), seen from inside: its ranks are
            # 0 … world-1 and `get_rank(group)` is this rank; one such group per method
            name = f"<{text}>"
            if self.ev.symbolic_name not in (None, name):
                raise Abort("two process groups this rank cannot tell apart", line)
            self.ev.symbolic_name = name
            return Group(name, tuple(range(self.world)))
        raise Abort("a process group this rank cannot know", line)

    def record(self, action: dict, line: int) -> None:
        if len(self.actions) >= MAX_ACTIONS:
            raise Abort("too many communication calls to evaluate", line)
        action["site"] = self.site(line)
        action["stack"] = [f"{short}:{ln} in {fn}" for fn, short, ln in reversed(self.stack)]
        self.actions.append(action)
        if self.cur is self.ev:
            self.ev.recorded_lines.add(line)

    def record_on(self, op: str, label: str, group: Group, line: int) -> None:
        """Record `op` on `group` (named in the action unless it is the world)."""
        action: dict = {"op": op, "label": label}
        if group.name != "WORLD":
            action["group"] = group.name
        self.record(action, line)

    def communicate(self, fact, args: list, kwargs: dict, e: ast.Call) -> object:
        line = e.lineno
        op = OP_NAMES.get(fact.op, fact.op)
        if op == "all_reduce_coalesced":
            op = "all_reduce"
        if op not in TRACE_OPS:
            raise Abort(f"`{fact.op}` is not modelled", line)
        group = self.group_of(_argspec(args, kwargs, fact.group), line, _arg_text(e, fact.group))
        action: dict = {"op": op}
        if group.name != "WORLD":
            action["group"] = group.name
        root = _argspec(args, kwargs, fact.root)
        group_root = _argspec(args, kwargs, fact.group_root)
        if self.rank not in group.members:
            # torch 2.13 on a group this rank is not in: a collective without a root, or with
            # a root given within the group (`group_src=`), warns and returns at once; a
            # global `src`/`dst` is first looked up in the group, which raises ValueError
            if fact.kind == "collective" and (fact.root is None or isinstance(group_root, int)):
                return None
            raise Stop("exception", line, "ValueError")
        peer: object = None
        if fact.root is not None or fact.group_root is not None:
            if isinstance(group_root, int):
                if not 0 <= group_root < len(group.members):
                    raise Stop("exception", line, "ValueError")
                peer = group.members[group_root]
            elif isinstance(root, int):
                peer = root
            elif fact.kind in ("send", "recv") or root is not None or group_root is not None:
                raise Abort("a peer or root this rank cannot know", line)
            else:
                peer = None  # recv from any source
                raise Abort("a receive from any source", line)
        if fact.kind in ("send", "recv"):
            self.peer_in_world(peer, line)
            if peer == self.rank or peer not in group.members:
                raise Stop("exception", line, "ValueError")
            action["peer"] = peer
            tag = kwargs.get("tag", 0)
            action["tag"] = tag if isinstance(tag, int) else 0
        elif peer is not None:
            action["root"] = peer
        asyn = _argspec(args, kwargs, fact.async_) if fact.async_ else False
        if fact.op in ("isend", "irecv"):
            asyn = True
        if isinstance(asyn, Unknown):
            raise Abort("async_op this rank cannot know", line)
        self._payload(op, fact.name.rsplit(".", 1)[-1], args, kwargs, action)
        handle = None
        if asyn:
            handle = f"h{self.handle_count}"
            self.handle_count += 1
            action["handle"] = handle
            if fact.op not in ("isend", "irecv"):
                action["async"] = True
        self.record(action, line)
        values.after_collective(self, fact.name.rsplit(".", 1)[-1], args, kwargs, line, e)
        if handle is not None:
            return Work([handle])
        return None

    def _payload(self, op: str, raw: str, args: list, kwargs: dict, action: dict) -> None:
        if raw.endswith("object_list") or raw.endswith("_object"):
            return
        if op == "all_to_all" and raw == "all_to_all_single":
            out_s = _arg(args, kwargs, 2, "output_split_sizes")
            in_s = _arg(args, kwargs, 3, "input_split_sizes")
            if out_s is not None and not _int_list(out_s):
                origin = values.fp_of(self, out_s, self.line)
                # where it is called from in the evaluated file: the innermost frame there
                # (as `local_site`, but 0 for a followed module's top level)
                here = self.line
                if self.cur is not self.ev:
                    frames = reversed(self.stack)
                    here = next((ln for _fn, s, ln in frames if s == self.ev.short), 0)
                self.split_origins.append((here, origin))
            values.after_exchange(self, args, kwargs, self.line)
            if _int_list(out_s):
                action["out_splits"] = list(out_s)
            if _int_list(in_s):
                action["in_splits"] = list(in_s)
            t = _arg(args, kwargs, 1, "input")
            out = _arg(args, kwargs, 0, "output")
            n = len(self.group_of(_arg(args, kwargs, 4, "group"), 0).members)
            for key, splits, buf in (("out_splits", out_s, out), ("in_splits", in_s, t)):
                if splits is None and isinstance(buf, Tensor) and buf.shape:
                    total = _numel(buf.shape)
                    if total % n == 0:
                        action[key] = [total // n] * n
            if isinstance(t, Tensor) and t.dtype:
                action["dtype"] = t.dtype
            return
        if op == "all_to_all" and raw == "all_to_all":
            # lists of tensors, one per peer: element j of the output list receives what
            # rank j sends this rank (the splits of `all_to_all_single`, tensor by tensor)
            outs, ins = (
                _arg(args, kwargs, 0, "output_tensor_list"),
                _arg(args, kwargs, 1, "input_tensor_list"),
            )
            for key, bufs in (("out_splits", outs), ("in_splits", ins)):
                if (
                    isinstance(bufs, list)
                    and bufs
                    and all(isinstance(b, Tensor) and b.shape is not None for b in bufs)
                ):
                    action[key] = [_numel(b.shape) for b in bufs]
            return
        pos = PAYLOAD.get(op)
        if pos is None:
            return
        t = args[pos] if pos < len(args) else kwargs.get("tensor")
        if isinstance(t, Tensor):
            if t.dtype:
                action["dtype"] = t.dtype
            # reduce_scatter's first argument is this rank's chunk of the result, as the
            # trace's shape is for the rooted gather/scatter (whose roots hold lists)
            if t.shape is not None and op not in ("gather", "scatter"):
                action["shape"] = list(t.shape)
            op_arg = kwargs.get("op")
            if isinstance(op_arg, Mod):
                action["reduce_op"] = op_arg.qname.rsplit(".", 1)[-1].lower()

    def batch(self, ops: object, e: ast.Call) -> object:
        if not isinstance(ops, list | tuple) or not all(isinstance(p, P2P) for p in ops):
            raise Abort("a batch of p2p operations this rank cannot know", e.lineno)
        name = f"b{self.batch_count}"
        self.batch_count += 1
        works = []
        for p in ops:
            group = self.group_of(p.group, e.lineno)
            if not isinstance(p.peer, int):
                raise Abort("a peer this rank cannot know", e.lineno)
            self.peer_in_world(p.peer, e.lineno)
            handle = f"h{self.handle_count}"
            self.handle_count += 1
            action = {"op": p.op, "peer": p.peer, "handle": handle, "batch": name}
            if group.name != "WORLD":
                action["group"] = group.name
            if isinstance(p.tag, int) and p.tag:
                action["tag"] = p.tag
            if isinstance(p.tensor, Tensor) and p.tensor.dtype:
                action["dtype"] = p.tensor.dtype
                if p.tensor.shape is not None:
                    action["shape"] = list(p.tensor.shape)
            self.record(action, e.lineno)
            works.append(Work([handle]))
        return works

    def peer_in_world(self, peer: object, line: int) -> None:
        """A peer computed outside 0 … world-1 at a world size larger than the smallest one
        evaluated (`peer = 1 - rank` at 4 ranks) says the program is written for fewer ranks,
        not that it is wrong: that world size is not judged. At the smallest size it is the
        program's own error (the last rank sending to `rank + 1`), reported as torch raises."""
        if isinstance(peer, int) and not 0 <= peer < self.world and self.world > self.ev.sizes[0]:
            raise Abort(f"a peer outside the world of {self.world} ranks", line)

    def wait(self, work: Work, e: ast.Call) -> None:
        self.record({"op": "wait", "handles": list(work.handles)}, e.lineno)
