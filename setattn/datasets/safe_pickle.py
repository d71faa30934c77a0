"""A restricted pickle decoder: plain data out of a pickle, without unpickling it.

``_decode_pickle`` walks the opcodes with ``pickletools`` and rebuilds only plain data
(numbers, strings, lists, dicts, NumPy arrays, SciPy CSR/CSC matrices as their
arrays). It never imports a module or calls anything named in the file; every other
global or opcode is refused with a ``ValueError``. It reads the raw Planetoid files.
"""

from __future__ import annotations

import pickletools
from typing import IO, Any

import numpy as np

# The globals a Planetoid pickle may name, and what we rebuild for each. Anything
# else in a file is refused.
_ARRAY_RECONSTRUCT = {"numpy.core.multiarray _reconstruct", "numpy._core.multiarray _reconstruct"}
_SPARSE_MATRICES = {
    "scipy.sparse.csr csr_matrix": "csr",
    "scipy.sparse._csr csr_matrix": "csr",
    "scipy.sparse.csc csc_matrix": "csc",
    "scipy.sparse._csc csc_matrix": "csc",
}
_ALLOWED_GLOBALS = {
    *_ARRAY_RECONSTRUCT,
    *_SPARSE_MATRICES,
    "numpy ndarray",
    "numpy dtype",
    "collections defaultdict",
    "__builtin__ list",
    "builtins list",
    "_codecs encode",
}

# Opcodes that push their argument (a number or a string) as is.
_LITERAL_OPCODES = frozenset((
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
))  # fmt: skip


class _Global:
    """A name (``"module attribute"``) from an allowed GLOBAL opcode; never imported."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Pending:
    """An object named by a pickle, waiting for its BUILD state (array, dtype, matrix)."""

    def __init__(self, kind: str, args: tuple) -> None:
        self.kind = kind
        self.args = args
        self.state: Any = None


def _decode_pickle(stream: IO[bytes], name: str) -> Any:
    """Rebuild the plain data in a pickle without executing it.

    Supports the opcodes of data pickles (protocols 0-5) and the globals in
    ``_ALLOWED_GLOBALS``; refuses everything else with a ``ValueError``.
    Python 2 byte strings (how NumPy stored array buffers) come back as ``str``
    decoded as latin-1, which is what ``encoding="latin1"`` would give.

    Args:
        stream: the open binary file.
        name: the file name, for error messages.
    """
    try:
        return _resolve(_run_opcodes(stream, name), {})
    except (IndexError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{name}: malformed pickle ({type(err).__name__}: {err})") from None
    except ValueError as err:
        if str(err).startswith(f"{name}: "):
            raise  # already explained by _run_opcodes
        raise ValueError(f"{name}: malformed pickle ({err})") from None  # e.g. from genops


class _Machine:
    """The decoder's state: the stack, the positions of its marks, and the memo."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def pop_mark(self) -> list[Any]:
        """Remove and return the items pushed since the last MARK."""
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items


def _run_opcodes(stream: IO[bytes], name: str) -> Any:
    """The stack machine of ``_decode_pickle``: returns the top object, unresolved."""
    machine = _Machine()
    for opcode, arg, _ in pickletools.genops(stream):
        op = opcode.name
        if op in ("PROTO", "FRAME"):
            continue
        if op == "STOP":
            break
        if not any(step(machine, op, arg, name) for step in _STEPS):
            raise ValueError(f"{name}: refusing pickle opcode {op}")
    stack = machine.stack
    if len(stack) != 1:
        raise ValueError(f"{name}: malformed pickle ({len(stack)} objects left on the stack)")
    return stack[0]


def _push_value(machine: _Machine, op: str, arg: Any, name: str) -> bool:
    """MARK, constants, literals and empty or small containers; False if ``op`` is not one."""
    stack = machine.stack
    if op == "MARK":
        machine.marks.append(len(stack))
    elif op in ("NONE", "NEWTRUE", "NEWFALSE"):
        stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[op])
    elif op in _LITERAL_OPCODES:
        stack.append(arg)
    elif op == "EMPTY_LIST":
        stack.append([])
    elif op == "EMPTY_DICT":
        stack.append({})
    elif op == "EMPTY_TUPLE":
        stack.append(())
    elif op in ("TUPLE1", "TUPLE2", "TUPLE3"):
        size = int(op[-1])
        items = tuple(stack[-size:])
        del stack[-size:]
        stack.append(items)
    else:
        return False
    return True


def _fill_container(machine: _Machine, op: str, arg: Any, name: str) -> bool:
    """Containers built from marked items, and items added to one; False otherwise."""
    stack = machine.stack
    if op == "TUPLE":
        stack.append(tuple(machine.pop_mark()))
    elif op == "LIST":
        stack.append(machine.pop_mark())
    elif op == "DICT":
        items = machine.pop_mark()
        stack.append(dict(zip(items[::2], items[1::2], strict=True)))
    elif op == "APPEND":
        value = stack.pop()
        stack[-1].append(value)
    elif op == "APPENDS":
        items = machine.pop_mark()
        stack[-1].extend(items)
    elif op == "SETITEM":
        value = stack.pop()
        key = stack.pop()
        stack[-1][key] = value
    elif op == "SETITEMS":
        items = machine.pop_mark()
        stack[-1].update(zip(items[::2], items[1::2], strict=True))
    else:
        return False
    return True


def _move_stack(machine: _Machine, op: str, arg: Any, name: str) -> bool:
    """The memo (PUT, MEMOIZE, GET) and stack moves (POP, POP_MARK, DUP); False otherwise."""
    stack = machine.stack
    if op in ("PUT", "BINPUT", "LONG_BINPUT"):
        machine.memo[arg] = stack[-1]
    elif op == "MEMOIZE":
        machine.memo[len(machine.memo)] = stack[-1]
    elif op in ("GET", "BINGET", "LONG_BINGET"):
        stack.append(machine.memo[arg])
    elif op == "POP":
        stack.pop()
    elif op == "POP_MARK":
        machine.pop_mark()
    elif op == "DUP":
        stack.append(stack[-1])
    else:
        return False
    return True


def _name_object(machine: _Machine, op: str, arg: Any, name: str) -> bool:
    """Allowed globals, calls on them and their BUILD state, as data; False otherwise."""
    stack = machine.stack
    if op in ("GLOBAL", "STACK_GLOBAL"):
        if op == "STACK_GLOBAL":
            attribute = stack.pop()
            module = stack.pop()
            arg = f"{module} {attribute}"
        if arg not in _ALLOWED_GLOBALS:
            raise ValueError(f"{name}: refusing to decode a pickle that names {arg!r}")
        stack.append(_Global(arg))
    elif op in ("REDUCE", "NEWOBJ"):
        args = stack.pop()
        func = stack.pop()
        stack.append(_apply_global(func, args, name))
    elif op == "BUILD":
        state = stack.pop()
        target = stack[-1]
        if not isinstance(target, _Pending):
            raise ValueError(f"{name}: BUILD on a {type(target).__name__} is not data")
        target.state = state
    else:
        return False
    return True


# The opcode groups, tried in turn: each step(machine, op, arg, name) performs ``op`` and
# returns True, or returns False when ``op`` is not one of its own. An opcode that no
# step takes is refused.
_STEPS = (_push_value, _fill_container, _move_stack, _name_object)


def _apply_global(func: Any, args: Any, name: str) -> Any:
    """Evaluate one allowed call (REDUCE / NEWOBJ) as data, never by calling it."""
    if not isinstance(func, _Global):
        raise ValueError(f"{name}: a pickle call on a non-global object is not data")
    target = func.name
    if target in _ARRAY_RECONSTRUCT:
        return _Pending("ndarray", args)
    if target == "numpy dtype":
        return _Pending("dtype", args)
    if target in _SPARSE_MATRICES:
        return _Pending(_SPARSE_MATRICES[target], args)
    if target == "collections defaultdict":
        return {}
    if target == "_codecs encode":  # how Python 3 protocol 2 stores bytes
        text, encoding = args
        return text.encode(encoding)
    raise ValueError(f"{name}: {target!r} cannot be applied")


def _resolve(obj: Any, done: dict[int, Any]) -> Any:
    """Replace every ``_Pending`` in ``obj`` by the NumPy object it describes."""
    if id(obj) in done:
        return done[id(obj)]
    if isinstance(obj, list):
        result: Any = [_resolve(item, done) for item in obj]
    elif isinstance(obj, tuple):
        result = tuple(_resolve(item, done) for item in obj)
    elif isinstance(obj, dict):
        result = {_resolve(k, done): _resolve(v, done) for k, v in obj.items()}
    elif isinstance(obj, _Pending):
        result = _build_pending(obj, done)
    else:
        return obj
    done[id(obj)] = result
    return result


def _build_pending(pending: _Pending, done: dict[int, Any]) -> Any:
    """Turn a pending dtype, ndarray or sparse matrix into NumPy data."""
    state = _resolve(pending.state, done)
    if pending.kind == "dtype":
        dtype = np.dtype(pending.args[0])
        if state is not None and state[1] in ("<", ">"):
            dtype = dtype.newbyteorder(state[1])
        return dtype
    if pending.kind == "ndarray":
        shape, dtype, fortran, raw = state[-4:]  # state = ([version,] shape, dtype, F, data)
        if dtype.hasobject:
            raise ValueError("refusing an object array in a pickle")
        if isinstance(raw, str):
            raw = raw.encode("latin-1")
        order = "F" if fortran else "C"
        return np.frombuffer(raw, dtype=dtype).reshape(shape, order=order).copy()
    # A SciPy sparse matrix: keep its compressed arrays as a plain dict.
    return {
        "format": pending.kind,
        "shape": tuple(int(n) for n in state["_shape"]),
        "data": state["data"],
        "indices": state["indices"],
        "indptr": state["indptr"],
    }
