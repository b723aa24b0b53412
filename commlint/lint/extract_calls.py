"""Calls in the extractor (`extract.Extractor`): communication calls (collectives, point to
point, group creation) become `Comm` nodes, calls of the project's functions `CallSite`s,
threads and executors `Spawn`s; rank sources, data sources, wrappers and library methods get
their values from the API table.
"""

from __future__ import annotations

import ast

from commlint.lint.extract_agreement import call as agreement_of_call
from commlint.lint.extract_agreement import combine
from commlint.lint.extract_syntax import (
    _is_const,
    _is_int_literal,
    _is_none,
    _kwarg,
    _name_of,
    _spec,
)
from commlint.lint.extract_values import (
    CLEAN,
    CONSTANT_TENSOR,
    CONSTANT_TENSOR_CALLS,
    ENV_GETTERS,
    GLOBAL,
    NON_TENSOR_METHODS,
    PURE_BUILTINS,
    WORLD_SIZE_TEXT,
    ZERO_NAMES,
    Val,
    _int,
    _literal_call,
    as_data,
    evolve,
    join,
    read_tensor,
)
from commlint.lint.ir import CallSite, Comm, Exit, Loop, ModuleCall, RootFact, Spawn
from commlint.lint.source_map import Arg, call_args
from commlint.lint.table import CallFact

DTENSOR = "torch.distributed.tensor.DTensor"
# Calls that do not raise for a rank-dependent argument value (output, logging, conversions
# of ints and strings): a `try` around them does not make the rank's path differ.
NEVER_RAISE = PURE_BUILTINS | {
    "print",
    "isinstance",
    "getattr",
    "hasattr",
    "debug",
    "info",
    "warning",
    "warn",
    "error",
    "exception",
    "log",
    "critical",
    "append",
    "extend",
    "update",
    "add",
    "to",
    "cpu",
    "cuda",
    "join",
    "tensor",
    "zeros",
    "ones",
    "full",
    "empty",
    "manual_seed",
    "seed",
}


def _generator_object(node: ast.expr) -> bool:
    """`g` or `self.rng`: a variable or an attribute of this object (not `torch.cuda`)."""
    if _name_of(node) is not None:
        return True
    return _is_self_attribute(node)


def _is_self_attribute(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_str(node: ast.expr | None) -> bool:
    """A string literal written as one (`"tp"`, `b"x"`)."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)


class Calls:
    """`Extractor`'s calls: communication, project functions, spawns, library methods."""

    # ----------------------------------------------------------------- calls
    def args_of(self, node: ast.Call) -> list[Arg]:
        """A call's arguments in source order (kept: every call asks several times)."""
        hit = self._args.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = call_args(node)
        self._args[id(node)] = (node, out)
        return out

    def ex_Call(self, node: ast.Call) -> Val:
        func = node.func
        names = self.qnames(func)
        recv_val: Val | None = None
        if isinstance(func, ast.Attribute):
            recv_val = self.expr(func.value)
        elif _name_of(func) is None:
            recv_val = self.expr(func)
        args = [self.expr(a.value) for a in self.args_of(node)]
        callee_text = self.text(func)
        last = callee_text.rsplit(".", 1)[-1]
        self._forget_constants(node)

        if getattr(self, "try_frames", None):
            self._note_rank_raise(node, names, last, args)
        # os.environ.get("RANK") / os.getenv("RANK")
        if any(q in ENV_GETTERS for q in names) and self.args_of(node):
            a0 = self.args_of(node)[0].value
            if _is_str(a0):
                return self._env_val(str(a0.value), self.text(node))  # type: ignore[attr-defined]
        for q in names:
            if q in self.table.exit_calls or q in ("builtins.exit", "builtins.quit"):
                self.emit(Exit("exit", self.pos(node), self.text(node)[:60]))
                return CLEAN
        for q in names:
            fact = self.table.call(q)
            if fact is not None:
                return self.comm_call(node, fact, callee_text)
        getter = self._getter_group(names)
        if getter is not None:
            return getter
        for q in names:
            rs = self.table.rank_source(q)
            if rs:
                return self.rank_source_val(node, rs)
        if "torch.compile" in names and args:
            return args[0]  # the same module, compiled: it communicates as it did
        for q in names:
            w = self.table.wrapper(q)
            if w:
                grp = self._group_arg(node, _spec(w.get("group")))
                typ = f"wrapped:{w['op']}:{grp[0]}"
                if "in_place" in w and self.args_of(node):
                    target = self.args_of(node)[int(w["in_place"])].value
                    self.bind(target, Val(typ=typ))
                    self._wrap_owner(target, typ)
                return Val(typ=typ)
        for q in names:
            typ = self.table.constructor(q)
            if typ:
                return Val(typ=typ, submesh=self._dtensor_mesh_dim(node, typ))
        for q in names:
            if self.table.in_set(self.table.thread_spawners, q):
                return self.spawn(node, "a thread", _kwarg(node, "target", 1))
        for q in names:
            if self.table.in_set(self.table.data_sources, q):
                if args and all(a.uniform for a in args):
                    return Val(uniform=True)  # `torch.equal(reduced_max, reduced_min)`
                # `torch.all(done)` of flags computed from a broadcast: the same everywhere
                # if the functions they came from answer so
                agreed = combine(args) if args else None
                if agreed is not None and agreed.settled:
                    return Val(uniform=True)
                origin = f"`{self.text(node)[:40]}` differs between ranks"
                return Val(data=True, origin=origin, agreed=agreed)
        for q in names:
            if q in self.table.random_tensors:
                v = join(*args)
                gen = _kwarg(node, "generator", None)
                if gen is not None and not any(a.tainted() or a.rank_tensor for a in args):
                    # drawn from a generator the program made and seeded: the same numbers
                    # wherever it was seeded alike (`manual_seed` of the rank marks it)
                    return v
                return Val(
                    tensor=True,
                    dims=v.dims,
                    data=v.data,
                    origin=v.origin or f"`{self.text(node)[:40]}` draws random numbers",
                )
            if q in CONSTANT_TENSOR_CALLS and _literal_call(node):
                # `torch.tensor([0])`: the same values on every rank
                return Val(uniform=True, origin=CONSTANT_TENSOR)
            if q in self.table.tensor_functions:
                v = join(*args)
                if v.tainted() or any(a.rank_tensor for a in args):
                    return evolve(v, tensor=True)
                return CLEAN
        if any(q.startswith("builtins.") for q in names) or (not names and last in PURE_BUILTINS):
            if last in PURE_BUILTINS:
                if last in ("float", "int", "bool") and len(args) == 1 and args[0].rank_tensor:
                    return read_tensor(args[0], self.text(node))
                v = join(*args)
                if last in ("range", "list", "tuple", "sorted", "set") and args:
                    ints = self._range_ints(node, args)
                    if ints is not None:
                        return Val(ints=ints)
                    if last != "range" and len(args) == 1 and args[0].ints is not None:
                        return Val(ints=args[0].ints)
                    stride = self._range_stride(node, args)
                    if stride is None and last != "range" and len(args) == 1:
                        stride = args[0].stride
                    if stride is not None:
                        return evolve(v, stride=stride)
                if last in ("int", "bool", "str") and args:
                    return evolve(v, exact=args[0].exact, zero=args[0].zero)
                if last == "next" and len(self.args_of(node)) == 1:
                    return Val(data=True, origin="`next()` without default")
                return v
            return CLEAN

        # methods, by receiver
        if isinstance(func, ast.Attribute) and recv_val is not None:
            res = self.method_call(node, func, recv_val, args, callee_text)
            if res is not None:
                return res
        func_name = _name_of(func)
        if func_name is not None:
            func_val = self.lookup(func_name)
        else:
            func_val = self._peek(func) if isinstance(func, ast.Attribute) else recv_val
        if func_val is not None and func_val.typ and func_val.typ.startswith("wrapped:"):
            _, op, grp = func_val.typ.split(":", 2)
            if op == "forward (DDP)" and self.text(func) in self.__dict__.get("no_sync", ()):
                self.last_forward = None  # under `no_sync`: neither it nor its backward syncs
                return CLEAN
            self.last_forward = (("typ", func_val.typ),)
            return self._emit_comm(
                node, CallFact(name=op, kind="collective", op=op), grp, callee_text, via=op
            )
        if func_val is not None and func_val.module_ref and not func_val.typ:
            # `model(x)` of a module from elsewhere: the analysis asks whether it is wrapped
            self.emit(ModuleCall(func_val.module_ref, callee_text, self.pos(node)))
            self.last_forward = func_val.module_ref
        if last in self.table.rank_helpers:
            return Val(
                dims=frozenset({GLOBAL}),
                zero=bool(ZERO_NAMES.search(last)) and "local" not in last,
                origin=f"`{self.text(node)[:40]}` depends on the rank",
            )
        self._callbacks(node, callee_text)
        # a call of a project function
        site = self.callsite(node, names, callee_text)
        data = any(a.data and not a.uniform for a in args)
        origin = next((a.origin for a in args if a.data), "")
        # what the call computes from: its arguments and the object of a method
        # (`logits.argmax(-1)`); a library's function computes from nothing else
        inputs = args
        if recv_val is not None and isinstance(func, ast.Attribute) and not self.on_module(func):
            inputs = [recv_val, *args]
        if site is None:
            agreed = combine(inputs) if any(a.agreeing for a in inputs) else None
            if agreed is not None and agreed.settled and not data:
                return Val(uniform=True)
            return Val(data=data, origin=origin, agreed=agreed)
        self.emit(site)
        self._handed_modules(node, site)
        return Val(
            data=data,
            deps=site.names,
            origin=origin,
            agreed=agreement_of_call(site.names, inputs),
            module_ref=(("returns", site.names),),
        )

    def _handed_modules(self, node: ast.Call, site: CallSite) -> None:
        """A variable handed to a project function may come back wrapped in place
        (`parallelize(model, mesh)` calling `fully_shard`): its later calls ask the analysis."""
        for k, a in enumerate(self.args_of(node)):
            target = a.value
            if not (_name_of(target) is not None or _is_self_attribute(target)):
                continue
            v = self._peek(target)
            if v.typ or v.tainted() or v.group is not None or v.mesh is not None:
                continue
            slot = a.keyword if a.keyword is not None else f"#{k}"
            ref = ("inplace", site.names, slot)
            if ref not in v.module_ref and len(v.module_ref) < 6:
                self.bind(target, evolve(v, module_ref=(*v.module_ref, ref)))

    def _wrap_owner(self, target: ast.expr, typ: str) -> None:
        """`fully_shard(block)` for a block of `model` (`for block in model.layers`,
        `model.layers[0]`): `model`'s forward runs the wrapped block's communication."""
        root = None
        if _name_of(target) is not None:
            root = self.loop_roots.get(_name_of(target))
        elif isinstance(target, ast.Attribute | ast.Subscript):
            inner = target.value
            while isinstance(inner, ast.Attribute | ast.Subscript):
                inner = inner.value
            root = inner if _name_of(inner) is not None else None
        if root is None or _name_of(root) == "self":
            return
        v = self.lookup(_name_of(root))
        if v is None or not (v.typ and v.typ.startswith("wrapped:")):
            self.bind(root, evolve(v or CLEAN, typ=typ, module_ref=()))

    def _note_rank_raise(self, node: ast.Call, names: list[str], last: str, args) -> None:
        """Inside a `try` body: a call that may raise on some ranks only — one whose argument
        depends on the rank or on this rank's data (`load_shard(rank)`, `open(f"{rank}.pt")`,
        `torch.load(paths[rank])`) and that is neither a communication call nor one that
        cannot fail on such a value (`print`, logging, `int`, `len`, formatting)."""
        if last in NEVER_RAISE or any(q.startswith("logging.") for q in names):
            return
        if any(self.table.call(q) is not None for q in names):
            return
        for a in args:
            if a.tainted() and not a.uniform:
                origin = a.origin or "an argument depends on the rank"
                frame = self.try_frames[-1]
                entry = (self.text(node)[:60], self.pos(node), origin)
                if entry not in frame:
                    frame.append(entry)
                return

    def _forget_constants(self, node: ast.Call) -> None:
        """A constant tensor (`stop = torch.tensor([0])`) changed in place (`stop.fill_(1)`)
        or handed to a call (which may change it) no longer holds the same values on every
        rank; a collective that takes it makes it uniform again afterwards."""
        func = node.func
        names = [a.value for a in self.args_of(node)]
        if isinstance(func, ast.Attribute) and func.attr.endswith("_"):
            names.append(func.value)
        for n in names:
            name = _name_of(n)
            if name is not None:
                v = self.env.get(name)
                if v is not None and v.origin == CONSTANT_TENSOR:
                    self.env[name] = CLEAN

    def _callbacks(self, node: ast.Call, callee_text: str) -> None:
        """A function defined inside this one and handed to a call (`study.optimize(
        _objective, n_trials=n)`, a closure as a callback) runs when the callee decides: a
        loop over it, whose count the file does not give (the linter does not look into the
        callee, even in the project)."""
        for a in self.args_of(node):
            if _name_of(a.value) is None:
                continue
            if self.scope.kind == "module":
                continue
            _, defs = self.scope.lookup(_name_of(a.value))
            if not defs or not all(d.kind == "def" for d in defs):
                continue
            site = self.callsite_from(a.value, self.qnames(a.value))
            if site is None:
                continue
            # as often on every rank, as far as this file tells (a count that differs is the
            # callee's to show: `checkpoint(custom_forward)` runs it once everywhere)
            self.emit(Loop(None, [site], self.pos(node), "for"))

    def _range_stride(self, node: ast.Call, args: list[Val]) -> tuple[int, int | None] | None:
        """`range(a, n, k)` with a literal step k: every element is ≡ a (mod k); `a` may be
        unknown (`range(first, world_size, k)` in a loop over `first`), the bound always is."""
        if self.text(node.func).rsplit(".", 1)[-1] != "range":
            return None
        if len(args) == 1 and WORLD_SIZE_TEXT.search(self.text(self.args_of(node)[0].value)):
            return (1, 0)  # range(world_size): every rank
        if len(args) != 3:
            return None
        if any(a.keyword is not None for a in self.args_of(node)):
            return None
        step = args[2].ints
        if not step or len(step) != 1 or step[0] <= 1:
            return None
        start = args[0].ints
        k = step[0]
        return (k, start[0] % k) if start and len(start) == 1 else (k, None)

    def _range_ints(self, node: ast.Call, args: list[Val]) -> tuple[int, ...] | None:
        last = self.text(node.func).rsplit(".", 1)[-1]
        if last != "range":
            return None
        nums = [a.ints[0] if a.ints and len(a.ints) == 1 else None for a in args]
        if None in nums or not 1 <= len(nums) <= 3:
            return None
        r = range(*nums)
        return tuple(r) if len(r) <= 65536 else None

    def callsite(self, node: ast.Call, names: list[str], text: str) -> CallSite | None:
        cands: list[str] = []
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and self.cls
        ):
            cands.append(f"{self.cls}.{func.attr}")
        for q in names:
            if q.startswith("builtins."):
                return None
            if ".<locals>.self." in q or q.startswith("self."):
                continue
            if "<locals>" in q:
                q = q.split(".<locals>.")[-1]
            cands.append(q)
            if "." not in q:
                cands.append(f"{self.module_name}.{self.qualprefix}{q}")
                cands.append(f"{self.module_name}.{q}")
        if not cands:
            if _name_of(func) is not None:
                cands.append(f"{self.module_name}.{_name_of(func)}")
            elif isinstance(func, ast.Attribute):
                return None
        group_args: dict[str, str] = {}
        module_args: dict[str, tuple[tuple, ...]] = {}
        for k, a in enumerate(self.args_of(node)):
            name = _name_of(a.value)
            if name is None and not isinstance(a.value, ast.Attribute | ast.Call | ast.Subscript):
                continue
            v = self._peek(a.value)
            gkey = v.group
            if gkey is None:
                # keyed as the caller's own collectives would key this expression
                if name is not None and name in self._params():
                    gkey = f"param:{name}"
                elif name == "None":
                    gkey = "WORLD"
                else:
                    gkey = self.text(a.value)
            slot = a.keyword if a.keyword is not None else f"#{k}"
            group_args[slot] = gkey
            refs = v.module_ref
            if v.typ and v.typ.startswith("wrapped:"):
                refs = (("typ", v.typ),)
            if refs:
                module_args[slot] = refs
        return CallSite(
            tuple(dict.fromkeys(cands)),
            text,
            self.pos(node),
            group_args,
            on_module=self.on_module(func),
            module_args=module_args,
        )

    def spawn(self, node: ast.Call, how: str, target: ast.expr | None) -> Val:
        if target is None:
            return CLEAN
        names = self.qnames(target)
        for q in names:
            fact = self.table.call(q)
            if fact is not None:
                comm = Comm(
                    kind=fact.kind,
                    op=fact.op,
                    group="WORLD",
                    text=self.text(target),
                    pos=self.pos(target),
                )
                self.emit(Spawn(comm, how, self.pos(node)))
                return CLEAN
        site = self.callsite_from(target, names)
        if site is not None:
            self.emit(Spawn(site, how, self.pos(node)))
        return CLEAN

    def callsite_from(self, target, names) -> CallSite | None:
        cands: list[str] = []
        if _is_self_attribute(target) and self.cls:
            cands.append(f"{self.cls}.{target.attr}")
        for q in names:
            if "<locals>" in q:
                q = q.split(".<locals>.")[-1]
            if q.startswith("self.") or q.startswith("builtins."):
                continue
            cands.append(q)
            if "." not in q:
                cands.append(f"{self.module_name}.{self.qualprefix}{q}")
                cands.append(f"{self.module_name}.{q}")
        if not cands:
            return None
        return CallSite(
            tuple(dict.fromkeys(cands)),
            self.text(target),
            self.pos(target),
            on_module=self.on_module(target),
        )

    def on_module(self, func: ast.expr) -> bool:
        """`mod.f` where `mod` is bound by an import (`torch.scatter`): a module's function."""
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return False
        return self.scope.is_import(func.value.id, self._at(func.value))

    def method_call(self, node, func: ast.Attribute, recv: Val, args, text) -> Val | None:
        meth = func.attr
        cargs = self.args_of(node)
        recv_text = self.text(func.value)
        forward = getattr(self, "last_forward", None)
        if meth == "backward" and forward and not cargs and recv.typ is None:
            # `loss.backward()` after a wrapped module's forward in this function: FSDP
            # reduce-scatters (DDP all-reduces) the gradients of what that forward used
            self.emit(ModuleCall(forward, text, self.pos(node), backward=True))
            return CLEAN
        # process groups, meshes (a DeviceMesh's methods are recognised by name)
        mesh_like = meth in ("get_group", "get_local_rank") and (
            not cargs or _is_str(cargs[0].value)
        )
        if recv.mesh is None and mesh_like:
            recv = evolve(recv, mesh=((), ()))
        if recv.mesh is not None:
            dim = None
            if cargs:
                a0 = cargs[0].value
                if _is_str(a0):
                    dim = str(a0.value)  # type: ignore[attr-defined]
                elif _is_int_literal(a0) and recv.mesh[0]:
                    i = _int(a0)
                    if i is not None and 0 <= i < len(recv.mesh[0]):
                        dim = recv.mesh[0][i]
            dim = dim or recv.submesh
            if dim is None and recv.mesh[0] and len(recv.mesh[0]) == 1:
                dim = recv.mesh[0][0]
            size = None
            if dim and dim in recv.mesh[0]:
                i = recv.mesh[0].index(dim)
                if i < len(recv.mesh[1]):
                    size = recv.mesh[1][i]
            key = f"mesh:{dim}" if dim else "mesh:?"
            if meth == "get_group":
                return Val(group=key, size=size)
            if meth in ("get_local_rank", "get_coordinate"):
                return Val(
                    dims=frozenset({key}),
                    origin=f"`{self.text(node)[:40]}` is the rank within the mesh dimension",
                    group_rank_of=key,
                )
            if meth == "get_rank":
                return Val(dims=frozenset({GLOBAL}), exact=True, origin=f"`{self.text(node)}`")
            if meth in ("size",):
                return CLEAN
        if recv.group is not None:
            if meth == "rank":
                return Val(
                    dims=frozenset({recv.group}),
                    origin=f"`{self.text(node)[:40]}` is the rank within the group",
                    group_rank_of=recv.group,
                )
            if meth == "size":
                return Val(ints=(recv.size,)) if recv.size else CLEAN
        typ = recv.typ
        if typ is None and meth == "full_tensor" and not self.on_module(func):
            typ = DTENSOR  # only a DTensor has it: a DTensor handed in (`weight.full_tensor()`)
        if typ is None:
            typ = self.receiver_type(recv_text)
        if typ and typ in self.table.methods:
            fact = self.table.methods[typ].get(meth)
            if fact is not None and (typ, recv_text, meth) in self.quiet_methods():
                return CLEAN  # `accelerator.backward(loss)` under `accelerator.no_sync(model)`
            if fact is not None:
                if fact.when_kw:
                    kw = _kwarg(node, fact.when_kw, None)
                    if kw is None or _is_const(kw, False):
                        return CLEAN
                gkey = f"<{fact.implicit_group}>" if fact.implicit_group else "WORLD"
                if fact.implicit_group and typ == DTENSOR and recv.submesh:
                    gkey = f"mesh:{recv.submesh}"  # the one mesh dimension it lives on
                v = self._emit_comm(node, fact, gkey, text, via=f"{recv_text}.{meth}")
                return v
        if meth in self.table.executor_methods and cargs:
            low = recv_text.lower()
            if "executor" in low or "pool" in low or typ == "executor":
                return self.spawn(node, "an executor", cargs[0].value)
        if meth in self.table.data_methods and not cargs:
            if recv.uniform:
                return recv
            v = as_data(recv, f"`{self.text(node)[:40]}` is this rank's data")
            if recv.agreed is not None and not recv.tainted():
                return evolve(v, agreed=recv.agreed)  # agreed if the broadcast's helpers are
            return v
        if meth == "wait":
            return CLEAN
        if meth in ("start", "join", "result") and recv.typ is None:
            return None
        if recv.rank_tensor and meth == "tolist" and not cargs:
            return read_tensor(recv, self.text(node))
        if recv.rank_tensor and meth not in NON_TENSOR_METHODS:
            return evolve(join(recv, *args), tensor=True)  # `probe.sum()`, `t.to(...)`
        if recv.tainted() and not recv.uniform:
            return join(recv, *args)
        if meth == "manual_seed" and args and join(*args).tainted():
            # a generator seeded from the rank draws this rank's own numbers
            seeded = Val(tensor=True, origin=f"`{self.text(node)[:40]}` seeds from the rank")
            if _generator_object(func.value) and not self.on_module(func):
                self.bind(func.value, seeded)
            return seeded
        return None

    def receiver_type(self, recv_text: str) -> str | None:
        """The API type of a receiver known by its text (`accelerator`, `trainer.strategy`),
        or `self` in a LightningModule."""
        receivers = self.table.receivers
        typ = receivers.get(recv_text) or receivers.get(recv_text.rsplit(".", 1)[-1])
        if typ is None and recv_text == "self" and self.cls in self.lightning_classes:
            typ = "lightning.LightningModule"
        return typ

    def quiet_methods(self) -> list[tuple[str, str, str]]:
        """(receiver type, receiver text, method) of the gradient-syncing methods the open
        no-sync contexts (`with accelerator.no_sync(model):`) keep local."""
        return self.__dict__.setdefault("quiet", [])

    def no_sync_context(self, call: ast.expr) -> tuple[list[str], list[tuple[str, str, str]]]:
        """`model.no_sync()` (DDP) or a framework's no-sync context from the table
        (`accelerator.no_sync(model)`): the wrapped models whose forward is quiet inside, and
        the receiver's methods that are."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            return [], []
        recv_text = self.text(call.func.value)
        if call.func.attr == "no_sync" and not call.args and not call.keywords:
            return [recv_text], []
        recv = self._peek(call.func.value)
        typ = recv.typ or self.receiver_type(recv_text)
        ctx = self.table.no_sync_contexts.get(typ or "")
        if ctx is None or call.func.attr != ctx.get("method"):
            return [], []
        models = []
        model = _kwarg(call, "model", ctx.get("model"))
        if model is not None:
            models.append(self.text(model))
        return models, [(typ, recv_text, m) for m in ctx.get("quiets", ())]

    def _dtensor_mesh_dim(self, node: ast.Call, typ: str) -> str | None:
        """The mesh dimension a DTensor is made on, when its mesh is one dimension of a named
        mesh (`distribute_tensor(t, mesh["tp"], ...)`) or a mesh of one named dimension: its
        `full_tensor()`/`redistribute()` then communicate on that dimension's groups only."""
        if typ != DTENSOR:
            return None
        arg = _kwarg(node, "device_mesh", 1)
        if arg is None:
            return None
        v = self._peek(arg)
        if v.mesh is None:
            return None
        if v.submesh is not None:
            return v.submesh
        names = v.mesh[0]
        if len(names) == 1:
            return names[0]
        # a mesh of several named dimensions: the ones its literal placements shard
        # (`[Replicate(), Shard(0)]` on ("dp", "tp") gathers over tp only), as "dp+tp"
        given = _kwarg(node, "placements", 2)
        if not isinstance(given, ast.List | ast.Tuple) or len(given.elts) != len(names):
            return None
        kinds = []
        for el in given.elts:
            call = el.value if isinstance(el, ast.Starred) else el
            if not isinstance(call, ast.Call):
                return None
            kinds.append(self.text(call.func).rsplit(".", 1)[-1])
        if not all(k in ("Shard", "Replicate", "Partial") for k in kinds):
            return None
        sharded = [n for n, k in zip(names, kinds, strict=True) if k != "Replicate"]
        return "+".join(sharded) if sharded else None

    def rank_source_val(self, node, rs) -> Val:
        dims = frozenset(rs.get("dims", [GLOBAL]))
        grp_of = None
        if "group" in rs:
            spec = _spec(rs["group"])
            gkey, given = self._group_arg(node, spec)
            if given and gkey != "WORLD":
                dims = frozenset({gkey})
                grp_of = gkey
            elif "group" in dims:
                dims = frozenset({GLOBAL})
        exact = bool(rs.get("exact")) and grp_of is None
        guard = rs.get("guard")
        for d in dims:
            if d != GLOBAL and grp_of is None:
                grp_of = d
        return Val(
            dims=dims,
            exact=exact,
            origin=f"`{self.text(node)[:50]}` is {'the rank' if exact else 'rank-dependent'}",
            guard=guard,
            group_rank_of=grp_of if not exact else None,
        )

    def _group_arg(self, node: ast.Call, spec) -> tuple[str, bool]:
        """The group key of a call's group argument, and whether one was given."""
        if spec is None:
            return "WORLD", False
        arg = _kwarg(node, spec[1], spec[0])
        if arg is None or _is_none(arg):
            return "WORLD", False
        v = self._peek(arg)
        if v.group:
            return v.group, True
        if v.mesh is not None:
            # a mesh as the group (`fully_shard(block, mesh=mesh["dp"])`): its one dimension
            dim = v.submesh or (v.mesh[0][0] if len(v.mesh[0]) == 1 else None)
            if dim is not None:
                return f"mesh:{dim}", True
        t = self.text(arg)
        if isinstance(arg, ast.Name) and arg.id in self._params():
            return f"param:{arg.id}", True
        return t, True

    def _params(self) -> set[str]:
        return getattr(self, "_param_names", set())

    def comm_call(self, node: ast.Call, fact: CallFact, text: str) -> Val:
        if fact.kind == "create":
            return self.create_call(node, fact, text)
        gkey, given = self._group_arg(node, fact.group)
        if fact.implicit_group and not given:
            gkey, given = f"<{fact.implicit_group}>", True
        return self._emit_comm(node, fact, gkey, text, default_group=not given, torch_api=True)

    def _emit_comm(
        self,
        node,
        fact: CallFact,
        gkey: str,
        text: str,
        *,
        via=None,
        default_group=False,
        torch_api=False,
    ) -> Val:
        blocking = True
        if fact.handle:
            blocking = False
        elif fact.async_ is not None:
            a = _kwarg(node, fact.async_[1], fact.async_[0])
            if _is_const(a, True):
                blocking = False
        gval = self._peek(_kwarg(node, fact.group[1], fact.group[0])) if fact.group else CLEAN
        cargs = self.args_of(node)
        payload = tuple(
            self._peek(a.value).payload or (self.text(a.value), "")
            for a in cargs
            if a.keyword is None
            and (_name_of(a.value) is not None or isinstance(a.value, ast.Attribute))
        )
        members = gval.members
        size = gval.size or (len(members) if members else None)
        member_stride = gval.stride if gval.group else None
        root = self._root_fact(node, fact)
        peer_dims = root.dims if root and fact.kind in ("send", "recv") else frozenset()
        rank_set, excluded, rcond = self._restriction()
        comm = Comm(
            kind=fact.kind,
            op=fact.op,
            group=gkey,
            text=text,
            pos=self.pos(node),
            blocking=blocking,
            default_group=default_group,
            torch_api=torch_api,
            root=root,
            peer_dims=peer_dims,
            members=members,
            member_stride=member_stride,
            payload=payload,
            group_size=size,
            rank_set=rank_set,
            rank_excluded=excluded,
            rank_cond=rcond,
            under_divergent=self.divergent_depth > 0,
            in_branch=bool(self.restrict),
            via=via,
        )
        self.emit(comm)
        outs = fact.outputs or ((0,) if fact.op in ("all_reduce", "broadcast") else ())
        for k in outs:
            if k < len(cargs) and cargs[k].keyword is None:
                self.bind_uniform(cargs[k].value)
        if not blocking:
            return Val(typ="handle")
        if fact.functional:
            return Val(uniform=True)
        return CLEAN

    def bind_uniform(self, target) -> None:
        if _name_of(target) is not None or isinstance(target, ast.Attribute):
            self.bind(target, Val(uniform=True))

    def _restriction(self):
        rank_set = None
        excluded: frozenset[int] | None = None
        rcond = None
        for t, f, c in self.restrict:
            if t is not None:
                rank_set = t if rank_set is None else rank_set & t
                rcond = c
            if f is not None:
                excluded = f if excluded is None else excluded | f
                rcond = rcond or c
        return rank_set, excluded, rcond

    def _root_fact(self, node: ast.Call, fact: CallFact) -> RootFact | None:
        for spec, is_group in ((fact.group_root, True), (fact.root, False)):
            if spec is None:
                continue
            arg = _kwarg(node, spec[1], spec[0])
            if arg is None:
                continue
            v = self._peek(arg)
            lit = v.ints[0] if v.ints and len(v.ints) == 1 else None
            return RootFact(
                param=spec[1] or "root",
                group_param=is_group,
                text=self.text(arg),
                literal=lit,
                dims=v.dims,
                exact=v.exact,
                group_rank_of=v.group_rank_of,
                pos=self.pos(arg),
            )
        return None

    def create_call(self, node: ast.Call, fact: CallFact, text: str) -> Val:
        local = False
        if fact.local_sync is not None:
            a = _kwarg(node, fact.local_sync[1], fact.local_sync[0])
            local = _is_const(a, True)
        whole = (  # `new_group(backend="gloo")`: every rank again, not a subgroup
            fact.op == "new_group"
            and fact.ranks is not None
            and _kwarg(node, fact.ranks[1], fact.ranks[0]) is None
        )
        if fact.op not in ("init_process_group", "destroy_process_group") and not whole:
            self.facts.creates_subgroups = True
        gkey, _ = self._group_arg(node, fact.group)
        rank_set, excluded, rcond = self._restriction()
        op = fact.op
        if fact.ranks is not None:
            # which group is created matters: the same groups in another order also hang
            ranks_arg = _kwarg(node, fact.ranks[1], fact.ranks[0])
            if ranks_arg is not None:
                op = f"{fact.op}({self.text(ranks_arg)[:40]})"
        if not local:
            self.emit(
                Comm(
                    kind="create",
                    op=op,
                    group=gkey,
                    text=text,
                    pos=self.pos(node),
                    rank_set=rank_set,
                    rank_excluded=excluded,
                    rank_cond=rcond,
                    under_divergent=self.divergent_depth > 0,
                )
            )
        if fact.op == "new_group":
            members = None
            stride = None
            if fact.ranks is not None:
                ra = _kwarg(node, fact.ranks[1], fact.ranks[0])
                if ra is not None:
                    v = self._peek(ra)
                    if v.ints is not None:
                        members = frozenset(v.ints)
                    stride = v.stride
            key = self._assign_key(node)
            return Val(
                group=key,
                members=members,
                size=len(members) if members else None,
                stride=stride if members is None else None,
                loop_group=self.loop_depth > 0,
            )
        if fact.op in ("init_device_mesh", "DeviceMesh"):
            names: tuple[str, ...] = ()
            shape: tuple[int, ...] = ()
            dn = _kwarg(node, "mesh_dim_names", None)
            if dn is not None and isinstance(dn, ast.Tuple | ast.List):
                names = tuple(
                    str(e.value)  # type: ignore[attr-defined]
                    for e in dn.elts
                    if _is_str(e)
                )
            sh = _kwarg(node, "mesh_shape", 1)
            if sh is not None:
                v = self._peek(sh)
                if v.ints:
                    shape = v.ints
            return Val(mesh=(names, shape))
        if fact.op == "new_subgroups":
            return Val(typ="subgroups")
        return CLEAN

    def _assign_key(self, node: ast.Call) -> str:
        """The group key of a `new_group` result: the text of the name it is assigned to."""
        # found by looking at the statement being processed
        return getattr(self, "_current_target", None) or f"new_group@{self.pos(node).line}"
