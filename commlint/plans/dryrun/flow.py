"""Where a number a call returned goes next, read from the running program's bytecode.

`float(loss)` / `int(n)` of a fake tensor cannot give an unread number: Python turns whatever
`__float__` / `__int__` return into a plain `float` / `int`, so the value could steer the
program unnoticed. Before giving a placeholder, the dry-run asks `only_computed_with(frame)`:
does the value the call at `frame.f_lasti` returns only get computed with, formatted,
printed, logged, put into local containers, used in operations on fake tensors, or returned
to a caller that does the same? Then no outcome of the program can depend on it, and the
placeholder is as good as the value. Anything else (a comparison, a truth test, an index, a
shape, a size, an attribute of an object, an unknown function) is "may steer": the caller
then keeps the fake-tensor limit (a real re-run within its budget, else an error at that
line). The analysis is conservative by construction: only the uses listed above pass.

It is a data-flow analysis of one code object at a time (CPython 3.11 bytecode: a stack
of producer sets per instruction, then the taint of the call's result through the stack,
the function's locals and the functions it is passed to), with names resolved against the
live frame where a receiver matters (`k.sub_(...)`: is `k` a fake tensor?). Other Python
versions get "may steer" for every call: the fallback, never a wrong pass.
"""

from __future__ import annotations

import bisect
import builtins
import dis
import functools
import inspect
import logging
import math
import sys
import types
from typing import Any

_MISSING = object()
_NULL, _EXC, _LASTI = -1, -2, -3  # producers that are not instructions
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_SUPPORTED = sys.version_info[:2] == (3, 11)

# Instructions that push nothing (what they pop is `-stack_effect`); any other not listed
# under `_special` pushes one value.
_PUSH_NONE = {
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "PRECALL", "KW_NAMES", "POP_TOP",
    "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR", "STORE_SUBSCR",
    "DELETE_FAST", "DELETE_NAME", "DELETE_GLOBAL", "DELETE_DEREF", "DELETE_ATTR",
    "DELETE_SUBSCR", "RETURN_VALUE", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
    "RAISE_VARARGS", "RERAISE", "POP_EXCEPT", "SETUP_ANNOTATIONS", "COPY_FREE_VARS",
    "MAKE_CELL", "IMPORT_STAR", "PRINT_EXPR", "LIST_APPEND", "SET_ADD", "MAP_ADD",
    "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE", "END_ASYNC_FOR",
}  # fmt: skip
_UNCONDITIONAL = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"}
_BINDS = {"STORE_FAST", "STORE_NAME", "DELETE_FAST", "DELETE_NAME"}  # (re)bind a local name
_ENDS = {"RETURN_VALUE", "RAISE_VARARGS", "RERAISE"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)

# Calls whose result is a string or nothing: the number ends there.
_SINKS = {builtins.print, str, repr, format, ascii, len, isinstance, type, id}
# Calls whose result is computed from their arguments (the result carries the number on).
# (Not `int` or `math.floor`: an integer made from the number is a size or an index.)
_CARRIERS = {float, abs, round, min, max, sum, pow, complex, list, tuple, dict}
_CARRIERS |= {zip, enumerate, reversed, iter, set}
_LOGGING = (logging.Logger, logging.LoggerAdapter)
_CONTAINER_METHODS = {
    list: {"append", "extend", "insert"},
    dict: {"update", "setdefault", "__setitem__"},
}
# How an instruction that reads a carried number treats it.
_ENDS_HERE = {"POP_TOP", "FORMAT_VALUE", "BUILD_STRING", "PRINT_EXPR", "PRECALL", "KW_NAMES"}
_HASHES = {"BUILD_SET", "BUILD_SLICE", "SET_ADD", "SET_UPDATE"}
_CARRY = {
    "BINARY_OP", "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "BUILD_TUPLE",
    "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP", "GET_ITER", "FOR_ITER", "LIST_TO_TUPLE",
    "UNPACK_SEQUENCE", "UNPACK_EX",
}  # fmt: skip
# Methods of a list or dict that hold carried numbers (the receiver is a local container).
_READS = {"items", "values", "keys", "copy", "get", "pop"}
_WRITES = {"append", "extend", "insert", "update", "setdefault"}
_TENSOR_SOURCES = ("new_", "item", "tolist", "numpy", "data_ptr", "untyped_storage")
# Where a number becomes a tensor's data (not a size): `torch.tensor([float(norm)])`. The
# tensor made there holds no value the dry-run knows (`unread.into_tensor`, told the call
# site through `PENDING`); position among the arguments (a method's without self), keyword.
# (`unread.INTO_TENSOR` is made from these two tables.)
INTO_TENSOR_FUNCTIONS = {
    "tensor": (0, "data"),
    "as_tensor": (0, "data"),
    "scalar_tensor": (0, "s"),
    "full": (1, "fill_value"),
    "full_like": (1, "fill_value"),
}
INTO_TENSOR_METHODS = {
    "new_tensor": (0, "data"),
    "new_full": (1, "fill_value"),
    "fill_": (0, "value"),
}
# Call sites (code, offset) a placeholder number was let go to as a tensor's data, each
# with whether the number is the same on every rank; the factory's call there takes it.
PENDING: dict[tuple[types.CodeType, int], bool] = {}
_SITES: list[tuple[types.CodeType, int]] = []
# A call of an attribute named as one of torch's legacy tensor types, on an object the
# analysis cannot name (`get_accelerator().FloatTensor([float(norm)])`: DeepSpeed's, the
# accelerator a call returns), is taken for a tensor's maker by that name alone: the call
# site with (file, line, name). Such a site stays `UNCONFIRMED` until the call makes a
# tensor of the number (`unread.into_tensor`); one never confirmed ends the rank as a
# fake-tensor limit (child.py), so a wrong guess is never a pass.
TENSOR_TYPES = {
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
    "ShortTensor", "ByteTensor", "CharTensor", "BoolTensor",
}  # fmt: skip
_GUESSED: dict[tuple[types.CodeType, int], tuple[str, int | None, str]] = {}
UNCONFIRMED: dict[tuple[types.CodeType, int], tuple[str, int | None, str]] = {}


class _Unknown(Exception):
    """The bytecode has a shape the analysis does not model: treat as "may steer"."""


class _Code:
    """One code object's instructions and the producers of each stack slot before each."""

    def __init__(self, code: types.CodeType) -> None:
        if code.co_flags & _GENERATOR_FLAGS:
            raise _Unknown("generator")
        self.code = code
        self.ins = list(dis.get_instructions(code))
        self.at = {ins.offset: k for k, ins in enumerate(self.ins)}
        self.offsets = [ins.offset for ins in self.ins]
        self.states: list[tuple[frozenset[int], ...] | None] = [None] * len(self.ins)
        self.succ: list[set[int]] = [set() for _ in self.ins]
        self._reach: dict[int, frozenset[int]] = {}
        self._flow()

    def reached_from(self, k: int) -> frozenset[int]:
        """The instructions the value stored by instruction k (a store of a name) may still
        be the name's value at: every path from k up to the next store or delete of it."""
        if k not in self._reach:
            name, seen, work = self.ins[k].argval, set(), list(self.succ[k])
            while work:
                j = work.pop()
                ins = self.ins[j]
                if j in seen or (ins.opname in _BINDS and ins.argval == name):
                    continue
                seen.add(j)
                work.extend(self.succ[j])
            self._reach[k] = frozenset(seen)
        return self._reach[k]

    def _effect(self, k: int, jump: bool) -> tuple[int, int]:
        """(pops, pushes) of instruction k, on its jump edge or its fall-through."""
        ins = self.ins[k]
        name = ins.opname
        if name in ("COPY", "SWAP", "GET_LEN", "FOR_ITER", "PRECALL"):
            return 0, 0  # handled by `_apply`, or (PRECALL) nothing moves
        if name == "CALL":  # (dis books the arguments' pops on PRECALL)
            return (ins.arg or 0) + 2, 1
        try:
            net = dis.stack_effect(ins.opcode, ins.arg, jump=jump)
        except ValueError:
            net = dis.stack_effect(ins.opcode, ins.arg)
        if name in _PUSH_NONE:
            pushes = 0
        elif name in ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"):
            return (0, 0) if jump else (1, 0)
        elif name in ("LOAD_METHOD", "BEFORE_WITH", "PUSH_EXC_INFO"):
            pushes = 2
        elif name == "LOAD_GLOBAL":
            pushes = net
        elif name == "UNPACK_SEQUENCE":
            pushes = ins.arg or 0
        elif name == "UNPACK_EX":
            pushes = (ins.arg or 0) % 256 + (ins.arg or 0) // 256 + 1
        elif name == "CHECK_EG_MATCH":
            pushes = 2
        elif name in ("SEND", "GET_ANEXT", "ASYNC_GEN_WRAP", "YIELD_VALUE", "RETURN_GENERATOR"):
            raise _Unknown(name)
        else:
            pushes = 1
        pops = pushes - net
        if pops < 0:
            raise _Unknown(f"{name}: stack effect {net}")
        return pops, pushes

    def _apply(self, k: int, stack: tuple[frozenset[int], ...], jump: bool) -> tuple:
        ins = self.ins[k]
        name, mine = ins.opname, frozenset((k,))
        if name == "COPY":
            return (*stack, stack[-(ins.arg or 1)])
        if name == "SWAP":
            n = ins.arg or 1
            s = list(stack)
            s[-1], s[-n] = s[-n], s[-1]
            return tuple(s)
        if name == "GET_LEN":
            return (*stack, mine)
        if name == "PUSH_NULL":
            return (*stack, frozenset((_NULL,)))
        if name == "FOR_ITER":
            return stack[:-1] if jump else (*stack, mine)
        pops, pushes = self._effect(k, jump)
        if pops > len(stack):
            raise _Unknown(f"{name}: pops {pops} of {len(stack)}")
        kept = stack[: len(stack) - pops]
        if name == "LOAD_GLOBAL" and pushes == 2:
            return (*kept, frozenset((_NULL,)), mine)
        return kept + (mine,) * pushes

    def _flow(self) -> None:
        handlers = [
            (e.start, e.end, e.target, e.depth, e.lasti)
            for e in dis.Bytecode(self.code).exception_entries
        ]
        work = [(0, ())]
        while work:
            k, stack = work.pop()
            old = self.states[k]
            if old is not None:
                if len(old) != len(stack):
                    raise _Unknown("stack depths differ")
                joined = tuple(a | b for a, b in zip(old, stack, strict=True))
                if joined == old:
                    continue
                stack = joined
            self.states[k] = stack
            ins = self.ins[k]
            for start, end, target, depth, lasti in handlers:
                if start <= ins.offset < end:
                    into = stack[:depth] + ((frozenset((_LASTI,)),) if lasti else ())
                    work.append((self.at[target], (*into, frozenset((_EXC,)))))
                    self.succ[k].add(self.at[target])
            if ins.opname in _ENDS:
                continue
            if ins.opcode in _JUMPS:
                work.append((self.at[ins.argval], self._apply(k, stack, True)))
                self.succ[k].add(self.at[ins.argval])
                if ins.opname in _UNCONDITIONAL:
                    continue
            if k + 1 < len(self.ins):
                work.append((k + 1, self._apply(k, stack, False)))
                self.succ[k].add(k + 1)

    def popped(self, k: int) -> list[frozenset[int]]:
        """The slots instruction k reads off the stack (for the ones `_apply` handles by
        hand: the slot it reads)."""
        stack = self.states[k] or ()
        ins = self.ins[k]
        if ins.opname in ("GET_LEN", "FOR_ITER"):
            return [stack[-1]]
        if ins.opname == "COPY":
            return []
        jump = ins.opname in ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
        pops = max(self._effect(k, False)[0], self._effect(k, True)[0] if jump else 0)
        return list(stack[len(stack) - pops :]) if pops else []


_CODES: dict[types.CodeType, _Code | None] = {}


def _analysed(code: types.CodeType) -> _Code | None:
    if code not in _CODES:
        try:
            _CODES[code] = _Code(code)
        except (_Unknown, KeyError, IndexError, ValueError):
            _CODES[code] = None
    return _CODES[code]


class _Scope:
    """Names resolved against a live frame (its locals) or a function's globals alone."""

    def __init__(
        self, c: _Code, frame: Any = None, globals_: dict | None = None, integer: bool = False
    ) -> None:
        self.c, self.integer = c, integer
        self.locals = frame.f_locals if frame is not None else {}
        self.globals = frame.f_globals if frame is not None else (globals_ or {})

    def value(self, slot: frozenset[int]) -> Any:
        """The object a stack slot holds, when a single instruction made it and that
        instruction reads a name, a constant or a module's attribute; else _MISSING."""
        if len(slot) != 1:
            return _MISSING
        (k,) = slot
        if k < 0:
            return _MISSING
        ins = self.c.ins[k]
        name = ins.opname
        if name in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF"):
            return self.locals.get(ins.argval, _MISSING)
        if name in ("LOAD_GLOBAL", "LOAD_NAME"):
            if name == "LOAD_NAME" and ins.argval in self.locals:
                return self.locals[ins.argval]
            found = self.globals.get(ins.argval, _MISSING)
            return getattr(builtins, ins.argval, _MISSING) if found is _MISSING else found
        if name == "LOAD_CONST":
            return ins.argval
        if name in ("LOAD_ATTR", "LOAD_METHOD"):
            owner = self.value(self.c.popped(k)[0])
            if owner is _MISSING:
                return _MISSING
            try:
                found = inspect.getattr_static(owner, ins.argval)
            except AttributeError:
                return _MISSING
            if isinstance(owner, types.ModuleType) or isinstance(found, types.FunctionType):
                return getattr(owner, ins.argval, _MISSING)  # a bound method when owner's
            if isinstance(
                found, (property, types.MemberDescriptorType, types.GetSetDescriptorType)
            ):
                # a computed attribute: read only off a tensor (`p.data`, `p.grad`), whose
                # attributes have no side effects
                if not _is_tensor(owner):
                    return _MISSING
                return getattr(owner, ins.argval, _MISSING)
            return getattr(owner, ins.argval, _MISSING) if callable(found) else found
        return _MISSING

    def local_name(self, slot: frozenset[int]) -> str | None:
        """The local variable a slot was loaded from (LOAD_FAST), if that is all it can be."""
        if len(slot) == 1:
            (k,) = slot
            if k >= 0 and self.c.ins[k].opname == "LOAD_FAST":
                return self.c.ins[k].argval
        return None


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


# Fake tensors the number would flow into (`k.sub_(0.01 * float(g))`): those that know a
# value must forget it if the number is given (a placeholder would make a wrong value
# known); whether they know one varies from call to call, so such a decision is not cached.
_FORGET: list[Any] = []


def _fake_tensor(value: Any) -> bool:
    """A fake tensor (what flows into it is never read back: one that knows its value is
    noted in `_FORGET`), or a DTensor over one."""
    from torch._subclasses.fake_tensor import FakeTensor

    local = getattr(value, "_local_tensor", value)
    if not isinstance(local, FakeTensor):
        return False
    _FORGET.append(local)
    return True


def _sink(fn: Any) -> bool:
    if fn in _SINKS:
        return True
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, _LOGGING) or getattr(fn, "__module__", None) == "logging":
        return True
    return fn is getattr(sys.modules.get("warnings"), "warn", None)


def _carrier(fn: Any) -> bool:
    try:
        if fn in _CARRIERS:
            return True
    except TypeError:  # unhashable
        return False
    if getattr(fn, "__name__", "") in ("floor", "ceil", "trunc", "isqrt", "comb", "perm"):
        return False
    return getattr(fn, "__module__", None) == "math" or getattr(fn, "__self__", None) is math


def _taint(scope: _Scope, start: set[int], names: set[str], depth: int) -> bool:
    """Follows values made by the instructions in `start` and held in the locals `names`
    through `scope`'s code. Returns whether one reaches `return`; raises _Unknown when one
    may steer the program. A local the number is stored into holds it up to the next store
    into that name (`total = t.item()` after `total += float(norm)`: a new value); `names`
    and containers that took the number in hold it everywhere."""
    c = scope.c
    tainted, locals_ = set(start), set(names)
    holding = set(names)  # names that hold the number at every read of them
    stores: set[int] = set()  # stores of the number into a name
    reached: dict[str, set[int]] = {}  # name: the reads such a store reaches
    cells = set(c.code.co_cellvars) | set(c.code.co_freevars)
    if locals_ & cells:
        raise _Unknown("a closure's variable")
    # a script's module level: its names are globals, local to it when nothing else reads them
    private = _module_locals(c.code) if c.code.co_name == "<module>" else frozenset()
    returns, changed = False, True

    def hit(slot: frozenset[int]) -> bool:
        return bool(slot & tainted)

    while changed:
        changed = False
        before = (len(tainted), len(locals_), len(stores))
        for k, ins in enumerate(c.ins):
            stack = c.states[k]
            if stack is None:
                continue
            name = ins.opname
            if name in ("LOAD_FAST", "LOAD_NAME"):
                if ins.argval in holding or k in reached.get(ins.argval, ()):
                    tainted.add(k)
                continue
            popped = c.popped(k)  # (none for a COPY: the copy shares the slot's producers)
            marks = [hit(slot) for slot in popped]
            if not any(marks):
                continue
            if name in _ENDS_HERE:
                continue
            if name in _HASHES or (name == "BUILD_MAP" and any(marks[0::2])):
                raise _Unknown(f"hashed, or used as a key or a bound at line {_line(c, k)}")
            if name == "BUILD_CONST_KEY_MAP" and marks[-1]:
                raise _Unknown(f"used as a key at line {_line(c, k)}")
            if name in _CARRY:
                tainted.add(k)
            elif name == "MAP_ADD":  # stack: map ... key, value
                if marks[0]:
                    raise _Unknown("used as a key")
                tainted |= stack[-(ins.arg or 1) - 2]
            elif name in ("LIST_APPEND", "LIST_EXTEND", "DICT_UPDATE", "DICT_MERGE"):
                tainted |= stack[-(ins.arg or 1) - 1]  # the container takes the number in
            elif name == "STORE_FAST" or (name == "STORE_NAME" and ins.argval in private):
                locals_.add(ins.argval)
                if k not in stores:
                    stores.add(k)
                    reached.setdefault(ins.argval, set()).update(c.reached_from(k))
            elif name == "BINARY_SUBSCR":
                if marks[1]:
                    raise _Unknown("used as an index or key")
                tainted.add(k)
            elif name == "STORE_SUBSCR":  # stack: value, container, key
                if marks[2]:
                    raise _Unknown("used as an index or key")
                if marks[0]:
                    container = scope.value(popped[1])
                    if _fake_tensor(container):
                        continue
                    local = _fresh(c, scope.local_name(popped[1]))
                    if local is None or not isinstance(container, (list, dict)):
                        raise _Unknown("stored into an object")
                    locals_.add(local)
                    holding.add(local)
            elif name == "RETURN_VALUE":
                returns = True
            elif name == "LOAD_METHOD" and ins.argval in _READS | _WRITES:
                tainted.add(k)  # a container's own method: `out.append`, `d.items`
            elif name == "CALL":
                if _call(scope, k, popped, marks, depth):
                    tainted.add(k)
            else:
                raise _Unknown(f"{name} at line {_line(c, k)}")
            if locals_ & cells:
                raise _Unknown("a closure's variable")
        changed = (len(tainted), len(locals_), len(stores)) != before
    return returns


_MODULE_LOCALS: dict[types.CodeType, frozenset[str]] = {}
# Names through which code reads module globals it does not name
_REFLECTION = {"globals", "vars", "locals", "eval", "exec"}


def _module_locals(code: types.CodeType) -> frozenset[str]:
    """The names a module's top-level code stores that no function, class or comprehension
    defined in it reads, and that it never reads by reflection: held only by that code, as a
    function's locals are (another module importing `__main__`'s names is not looked for)."""
    found = _MODULE_LOCALS.get(code)
    if found is not None:
        return found
    stored = {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_NAME"}
    read: set[str] = set()
    todo = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    while todo:
        inner = todo.pop()
        read.update(inner.co_names)
        read.update(inner.co_freevars)
        todo.extend(c for c in inner.co_consts if isinstance(c, types.CodeType))
    if (read | set(code.co_names)) & _REFLECTION:
        stored = set()
    found = _MODULE_LOCALS[code] = frozenset(stored - read)
    return found


def _line(c: _Code, k: int) -> int | None:
    return c.ins[k].positions.lineno if c.ins[k].positions else None


def _fresh(c: _Code, name: str | None) -> str | None:
    """`name` when it is a local variable only ever bound to a list or dict built in this
    function (no other reference to it exists unless the function makes one), else None."""
    if name is None:
        return None
    code = c.code
    if name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
        return None
    built = ("BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP")
    for k, ins in enumerate(c.ins):
        stored = ins.opname == "STORE_FAST" and ins.argval == name and c.states[k] is not None
        if stored and any(j < 0 or c.ins[j].opname not in built for j in c.popped(k)[0]):
            return None
    return name


def _method_load(c: _Code, slot: frozenset[int]) -> int | None:
    if len(slot) == 1:
        (k,) = slot
        if k >= 0 and c.ins[k].opname == "LOAD_METHOD":
            return k
    return None


def _kw_names(c: _Code, k: int) -> tuple[str, ...]:
    for j in range(k - 1, max(k - 3, -1), -1):
        if c.ins[j].opname == "KW_NAMES":
            return tuple(c.code.co_consts[c.ins[j].arg or 0])
        if c.ins[j].opname not in ("PRECALL", "CACHE"):
            break
    return ()


def _call(scope: _Scope, k: int, popped: list, marks: list[bool], depth: int) -> bool:
    """A call that reads a carried number: whether its result carries it on (raises
    _Unknown when the call may steer)."""
    c = scope.c
    if len(popped) < 2:
        raise _Unknown("call")
    first, args, amarks = popped[0], popped[2:], marks[2:]
    method = _method_load(c, first)
    if method is not None:  # LOAD_METHOD: method (or NULL), self, args...
        owner_slot = c.popped(method)[0]
        fn, receiver, fn_marked = scope.value(first), scope.value(owner_slot), marks[0] or marks[1]
    elif _NULL in first and len(first) == 1:  # NULL, callable, args...
        owner_slot = None
        fn, receiver, fn_marked = scope.value(popped[1]), None, marks[1]
    else:
        raise _Unknown(f"a call of an unusual shape at line {_line(c, k)}")
    if fn_marked:
        where = _method_load(c, first)
        verb = c.ins[where].argval if where is not None else None
        if verb in _READS and not any(amarks):
            return True  # `d.items()`: carries the container's numbers on
        if verb in _WRITES and not (verb in ("insert", "setdefault") and amarks[:1] == [True]):
            return verb == "setdefault"
        raise _Unknown("a method of the number")
    guessed = None
    if fn is _MISSING:
        guessed = _tensor_type_named(c, first if method is not None else popped[1])
        if guessed is None:
            raise _Unknown(f"an unknown call at line {_line(c, k)}")
    if _sink(fn):
        return False
    if _carrier(fn):
        return True
    bound = receiver if receiver is not None else getattr(fn, "__self__", None)
    name = guessed or getattr(fn, "__name__", "")
    # a guessed maker takes its data as `torch.tensor(data)` does
    into = (0, "data") if guessed else _into_tensor(fn, bound, name)
    if into is not None:
        kw = _kw_names(c, k)
        positional = len(args) - len(kw)
        for index, marked in enumerate(amarks):
            taken = index == into[0] if index < positional else kw[index - positional] == into[1]
            if marked and not taken:
                raise _Unknown(f"a size or option of {name} at line {_line(c, k)}")
        site = (c.code, c.ins[k].offset)
        if guessed is not None:  # confirmed when the call makes the tensor
            _GUESSED[site] = (c.code.co_filename, _line(c, k), guessed)
        _SITES.append(site)
        return False  # the tensor made holds no value the dry-run knows
    if _fake_tensor(bound) and not name.startswith(_TENSOR_SOURCES) and not scope.integer:
        return False  # an operation on a fake tensor: its result is as unread as the tensor
    for kind, methods in _CONTAINER_METHODS.items():
        if isinstance(bound, kind) and name in methods:
            if name in ("insert", "setdefault") and amarks[:1] == [True]:
                raise _Unknown("used as an index or key")
            local = _fresh(c, scope.local_name(owner_slot) if owner_slot is not None else None)
            if local is None:
                raise _Unknown("put into a container that outlives the function")
            _taint(scope, set(), {local}, depth)
            return False
    target = getattr(fn, "__func__", fn)
    if isinstance(target, types.FunctionType) and depth < 4:
        callee = _analysed(target.__code__)
        if callee is None:
            raise _Unknown("a function the analysis cannot read")
        params = target.__code__.co_varnames[: target.__code__.co_argcount]
        kw = _kw_names(c, k)
        positional = len(args) - len(kw)
        offset = 1 if isinstance(fn, types.MethodType) else 0
        names: set[str] = set()
        for index, marked in enumerate(amarks):
            if not marked:
                continue
            if index >= positional:
                names.add(kw[index - positional])
            elif index + offset < len(params):
                names.add(params[index + offset])
            else:
                raise _Unknown("passed as *args")
        if not names <= set(target.__code__.co_varnames):
            raise _Unknown("passed as **kwargs")
        inner = _Scope(callee, None, target.__globals__, scope.integer)
        return _taint(inner, set(), names, depth + 1)
    raise _Unknown(f"passed to {name or fn!r} at line {_line(c, k)}")


def _tensor_type_named(c: _Code, slot: frozenset[int]) -> str | None:
    """The name of a callable loaded as an attribute named as a legacy tensor type."""
    if len(slot) == 1:
        (j,) = slot
        ins = c.ins[j] if j >= 0 else None
        if ins and ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in TENSOR_TYPES:
            return ins.argval
    return None


def _into_tensor(fn: Any, bound: Any, name: str) -> tuple[int, str] | None:
    if isinstance(fn, functools.partial):  # DeepSpeed's `FloatTensor`: torch.tensor, dtype set
        inner = fn.func
        at = _into_tensor(inner, None, getattr(inner, "__name__", ""))
        if at is None or at[0] < len(fn.args):
            return None
        return at[0] - len(fn.args), at[1]
    if name in INTO_TENSOR_METHODS and _is_tensor(bound):
        return INTO_TENSOR_METHODS[name]
    torch = sys.modules.get("torch")
    if name in INTO_TENSOR_FUNCTIONS and torch is not None and fn is getattr(torch, name, None):
        return INTO_TENSOR_FUNCTIONS[name]
    return None


_DECIDED: dict[tuple, tuple[bool, tuple[tuple[types.CodeType, int], ...]]] = {}


def only_computed_with(
    frame: Any, integer: bool = False, placeholder_uniform: bool | None = None
) -> bool:
    """Whether the value the call at `frame.f_lasti` returns never steers the program:
    only computed with, printed, logged, kept in local containers, applied to fake tensors,
    made a tensor's data, or returned to a caller (up the live stack) that does the same.
    An `integer` (`int()`'s result) is never taken by a tensor's method: there it would be a
    size or an index. With `placeholder_uniform` (a plain placeholder number is given, the
    same on every rank or not), the calls that make it a tensor's data are told (`PENDING`)."""
    if not _SUPPORTED or frame is None:
        return False
    chain, f = [], frame
    while f is not None:
        chain.append((f.f_code, f.f_lasti))
        if f.f_code.co_name == "<module>":
            break
        f = f.f_back
    key = (integer, *chain)
    if key in _DECIDED:
        decided, sites = _DECIDED[key]
    else:
        _FORGET.clear()
        _SITES.clear()
        decided = _follow(frame, integer)
        sites = tuple(_SITES)
        _SITES.clear()
        if not _FORGET:
            # else asked again each time: which tensors know values varies
            _DECIDED[key] = decided, sites
        elif decided:
            from commlint.plans.dryrun.provenance import forget

            for t in _FORGET:
                if t.constant is not None:
                    forget(t)  # what the number flows into is not known any more
        _FORGET.clear()
    if decided and placeholder_uniform is not None:
        for site in sites:
            PENDING[site] = PENDING.get(site, True) and placeholder_uniform
            if site in _GUESSED:
                UNCONFIRMED[site] = _GUESSED[site]
    return decided


def _follow(frame: Any, integer: bool) -> bool:
    f, callee = frame, None
    while f is not None:
        at = _frame_call(f)
        if at is None:
            return False
        c, k = at
        scope = _Scope(c, f, integer=integer)
        if callee is not None and not _calls(scope, k, callee):
            return False  # called from C code (a hook, `map`): who gets the value is unknown
        try:
            returned = _taint(scope, {k}, set(), 0)
        except (_Unknown, KeyError, IndexError, TypeError, ValueError):
            return False
        if not returned or f.f_code.co_name == "<module>":
            return True
        callee, f = f.f_code, f.f_back  # the caller receives it: its call at f_lasti made it
    return False


def _frame_call(frame: Any) -> tuple[_Code, int] | None:
    """A running frame's analysed code and the CALL instruction it is in."""
    c = _analysed(frame.f_code)
    k = _call_at(c, frame.f_lasti) if c is not None else None
    return None if c is None or k is None else (c, k)


def _call_at(c: _Code, lasti: int) -> int | None:
    """The CALL instruction a frame is in: f_lasti is the call itself when C code called out
    (`float()`), its last inline cache entry when Python code did, or its PRECALL, which a
    specialised call of a builtin type runs the call from."""
    k = bisect.bisect_right(c.offsets, lasti) - 1
    if 0 <= k < len(c.ins) - 1 and c.ins[k].opname == "PRECALL":
        k += 1
    if k < 0 or c.ins[k].opname != "CALL" or c.states[k] is None:
        return None
    return k


def _calls(scope: _Scope, k: int, code: types.CodeType) -> bool:
    """Whether the call at instruction k calls (the function of) `code` itself."""
    popped = scope.c.popped(k)
    if len(popped) < 2:
        return False
    first = popped[0]
    fn = scope.value(first if _method_load(scope.c, first) is not None else popped[1])
    call = inspect.getattr_static(type(fn), "__call__", None)  # an instance called: its class's
    for candidate in (fn, getattr(fn, "__func__", None), call):
        if getattr(candidate, "__code__", None) is code:
            return True
    return False


_COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def tested_at_once(frame: Any) -> tuple[str | None, Any, bool, bool | None] | None:
    """When the value the call at `frame.f_lasti` returns goes straight into one test and
    nowhere else (`if float(loss) > 10:`, `while int(n):`, `assert float(x) < 1`): (the
    comparison: "lt", "gt", ... or None for a truth test, the number compared with, whether
    the call's value is the left operand, the outcome that makes an `assert` hold or None).
    None when the value is used otherwise."""
    at = _frame_call(frame) if _SUPPORTED and frame is not None else None
    if at is None:
        return None
    c, k = at
    users = [j for j in range(len(c.ins)) if c.states[j] is not None and _reads(c, j, k)]
    if len(users) != 1:
        return None
    (j,) = users
    op, other, left, tested = None, None, True, k
    if c.ins[j].opname == "COMPARE_OP":
        op = _COMPARE.get(c.ins[j].argval)
        a, b = c.popped(j)
        left = k in a
        other = _Scope(c, frame).value(b if left else a)
        if op is None or isinstance(other, bool) or not isinstance(other, (int, float)):
            return None
        tested, j = j, j + 1
    jump = c.ins[j].opname
    if not (jump.startswith("POP_JUMP") and jump.endswith(("IF_TRUE", "IF_FALSE"))):
        return None
    if c.popped(j) != [frozenset((tested,))] or (tested != k and _readers(c, tested) != 1):
        return None
    holds = None
    if j + 1 < len(c.ins) and c.ins[j + 1].opname == "LOAD_ASSERTION_ERROR":
        holds = jump.endswith("IF_TRUE")
    return op, other, left, holds


def _readers(c: _Code, k: int) -> int:
    return sum(1 for j in range(len(c.ins)) if c.states[j] is not None and _reads(c, j, k))


def _reads(c: _Code, j: int, k: int) -> bool:
    return any(k in slot for slot in c.popped(j)) if c.ins[j].opname != "COPY" else False
