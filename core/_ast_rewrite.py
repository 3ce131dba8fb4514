"""The syntax-tree rewrite behind ``enable_conditionals=True`` (``_conditionals.py``).

A function is re-compiled from its source with:

* ``if test: A else: B`` ->
  ``def _t(): nonlocal v...; A`` / ``def _f(): nonlocal v...; B`` (``v``: every variable ``A``
  or ``B`` assigns) / a getter and a setter of the if's outputs (those of ``v`` also read
  outside the ``if``, a syntactic stand-in for AutoGraph's liveness) / ``__dl__.if_stmt(test,
  _t, _f, get, set, names)``; ``elif`` chains are nested ``if``s. Every such variable is first
  set to an "undefined" marker at the top of the function (so ``nonlocal`` finds it and an
  output set in one branch only is detected). Items and attributes set in a branch
  (``d["k"] = ...``, ``o.a = ...``, with a constant key) are outputs too.
* ``return`` at the end of both branches (or an early ``return`` followed by more code, which
  becomes the ``else``) -> an assignment in each branch and one ``return`` after the ``if``.
  Other ``return`` / ``break`` / ``continue`` / ``yield`` in a branch leave the ``if`` as Python
  code, whose test then refuses DataNodes with an explanation (``native_test``).
* ``a and b`` -> ``__dl__.and_(a, lambda: b)``, ``a or b`` likewise, ``not a`` ->
  ``__dl__.not_(a)``.
* ``f(...)`` -> ``__dl__.call(f)(...)``: plain user functions and methods called from the
  pipeline are converted the same way when called (not those of dlpipe, numpy, the standard
  library or installed packages).

``__dl__`` is handed to the rewritten function as a closure variable (the module's globals are
not touched); line numbers stay those of the original source.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
import types
from collections.abc import Callable

_SKIP_PACKAGES = {"dlpipe", "numpy", "cupy", "torch", "jax", "jaxlib", "tensorflow", "nvidia"}


# --- which names a block assigns ---------------------------------------------------------------


class _Assigned(ast.NodeVisitor):
    """Names bound by a list of statements in the current function scope (not in nested
    functions, lambdas, classes or comprehensions; not ``except ... as`` names)."""

    def __init__(self):
        self.names: list[str] = []

    def add(self, name: str) -> None:
        if name not in self.names:
            self.names.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.add(node.id)

    def visit_FunctionDef(self, node) -> None:
        self.add(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node) -> None:
        pass

    def visit_ListComp(self, node) -> None:
        pass

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        for st in node.body:
            self.visit(st)

    def visit_Import(self, node) -> None:
        for alias in node.names:
            self.add((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import


def assigned(stmts: list[ast.stmt]) -> list[str]:
    v = _Assigned()
    for st in stmts:
        v.visit(st)
    return v.names


class _Finder(ast.NodeVisitor):
    """Statements that cannot move into a closure: ``return``, ``yield``, ``await`` anywhere
    in the block's own scope; ``break`` / ``continue`` outside loops of the block."""

    def __init__(self):
        self.found: str | None = None
        self.loop_depth = 0

    def visit_Return(self, node) -> None:
        self.found = self.found or "return"

    def visit_Yield(self, node) -> None:
        self.found = self.found or "yield"

    visit_YieldFrom = visit_Await = visit_Yield

    def visit_Break(self, node) -> None:
        if self.loop_depth == 0:
            self.found = self.found or "break"

    def visit_Continue(self, node) -> None:
        if self.loop_depth == 0:
            self.found = self.found or "continue"

    def visit_For(self, node) -> None:
        self.loop_depth += 1
        for st in node.body:
            self.visit(st)
        self.loop_depth -= 1
        for st in node.orelse:
            self.visit(st)

    visit_While = visit_AsyncFor = visit_For

    def visit_FunctionDef(self, node) -> None:
        pass

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _loads(stmts: list[ast.stmt]) -> dict[str, int]:
    """How many times each name is read in the statements (nested functions included)."""
    counts: dict[str, int] = {}
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def blocker(stmts: list[ast.stmt]) -> str | None:
    f = _Finder()
    for st in stmts:
        f.visit(st)
    return f.found


def ends_with_return(stmts: list[ast.stmt]) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return (
        isinstance(last, ast.If) and ends_with_return(last.body) and ends_with_return(last.orelse)
    )


# --- the rewrite ---------------------------------------------------------------------------------

_HELPER = "__dl__"


def _helper(attr: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(_HELPER, ast.Load()), attr=attr, ctx=ast.Load())


class _Rewriter(ast.NodeTransformer):
    def __init__(self):
        self.counter = 0
        self.scopes: list[dict] = []  # per function being rewritten: names to initialise

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"__dl_{stem}_{self.counter}"

    # --- functions ------------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        args = node.args
        params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        declared: set[str] = set()
        for st in ast.walk(node):
            if isinstance(st, ast.Global | ast.Nonlocal) and st is not node:
                declared |= set(st.names)
        self.scopes.append(
            {
                "init": [],
                "skip": params | declared,
                "declared": declared,
                "loads": _loads(node.body),
            }
        )
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        body = self.block(node.body, function_body=True)
        scope = self.scopes.pop()
        init = [
            ast.Assign(
                targets=[ast.Name(name, ast.Store())],
                value=ast.Call(_helper("undefined"), [ast.Constant(name)], []),
            )
            for name in scope["init"]
        ]
        doc = body[:1] if body and _is_docstring(body[0]) else []
        node.body = doc + init + body[len(doc) :]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    # --- statements -------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], function_body: bool = False) -> list[ast.stmt]:
        stmts = list(stmts)
        out: list[ast.stmt] = []
        i = 0
        while i < len(stmts):
            st = stmts[i]
            if isinstance(st, ast.If):
                rest = stmts[i + 1 :]
                if ends_with_return(st.body) and not st.orelse and rest:
                    st.orelse, stmts = rest, stmts[: i + 1]  # an early return: the rest is the else
                elif function_body and not rest and ends_with_return(st.body) and not st.orelse:
                    st.orelse = [ast.Return(value=None)]
                out += self.rewrite_if(st)
            else:
                new = self.visit(st)
                out += new if isinstance(new, list) else [new]
            i += 1
        return out

    def visit_For(self, node):
        node.iter = self.visit(node.iter)
        node.body = self.block(node.body)
        node.orelse = self.block(node.orelse)
        return node

    visit_AsyncFor = visit_For

    def visit_While(self, node):
        node.test = self.visit(node.test)
        node.body = self.block(node.body)
        node.orelse = self.block(node.orelse)
        return node

    def visit_With(self, node):
        node.items = [self.visit(it) for it in node.items]
        node.body = self.block(node.body)
        return node

    visit_AsyncWith = visit_With

    def visit_Try(self, node):
        node.body = self.block(node.body)
        for h in node.handlers:
            h.body = self.block(h.body)
        node.orelse = self.block(node.orelse)
        node.finalbody = self.block(node.finalbody)
        return node

    visit_TryStar = visit_Try

    def visit_If(self, node):  # an `if` reached outside a block (should not happen)
        return self.rewrite_if(node)

    def rewrite_if(self, node: ast.If) -> list[ast.stmt]:
        # the variables the branches assign, nested ifs' included (read before those become
        # closures, whose bodies the scan does not enter); the if's outputs, merged after it,
        # are those also read outside the if (a variable used only inside a branch is not)
        names = assigned(node.body + node.orelse)
        scope = self.scopes[-1] if self.scopes else {"init": [], "skip": set(), "loads": {}}
        inside = _loads(node.body + node.orelse)
        outputs = [n for n in names if scope["loads"].get(n, 0) > inside.get(n, 0)]
        # items and attributes set in a branch (d["k"] = ..., o.a = ...) are outputs too
        parts = [
            c for c in composites(node.body + node.orelse)
            if scope["loads"].get(c[0], 0) > inside.get(c[0], 0)
        ]  # fmt: skip
        test = self.visit(node.test)
        body = self.block(node.body)
        orelse = self.block(node.orelse)
        tail: list[ast.stmt] = []
        if ends_with_return(body) and ends_with_return(orelse):
            ret = self.fresh("ret")
            body, orelse = _returns_to(body, ret), _returns_to(orelse, ret)
            tail = [ast.Return(value=ast.Name(ret, ast.Load()))]
            names.append(ret)
            outputs.append(ret)
        why = blocker(body) or blocker(orelse)
        if why is not None:
            native = ast.Call(_helper("native_test"), [test, ast.Constant(why)], [])
            return [ast.If(test=native, body=body, orelse=orelse)] + tail
        for n in names:  # parameters are defined already; global/nonlocal names are not ours
            if n not in scope["skip"] and n not in scope["init"]:
                scope["init"].append(n)
        declared = scope.get("declared", set())
        names = [n for n in names if n not in declared]  # a parameter is merged like any local
        outputs = [n for n in outputs if n not in declared]
        t_name, f_name = self.fresh("true"), self.fresh("false")
        get_name, set_name = self.fresh("get"), self.fresh("set")
        nonlocal_ = [ast.Nonlocal(names=list(names))] if names else []
        loads = [ast.Name(n, ast.Load()) for n in outputs]
        loads += [ast.Call(_helper("read"), [_lambda(_part(c, ast.Load()))], []) for c in parts]
        setters: list[ast.stmt] = []
        for i, n in enumerate(outputs):
            setters.append(ast.Assign(targets=[ast.Name(n, ast.Store())], value=_item(i)))
        for i, c in enumerate(parts, start=len(outputs)):
            base, kind, key = c
            args = [ast.Name(base, ast.Load()), ast.Constant(kind), ast.Constant(key), _item(i)]
            setters.append(ast.Expr(ast.Call(_helper("write"), args, [])))
        defs = [
            _def(t_name, [], nonlocal_ + (body or [ast.Pass()])),
            _def(f_name, [], nonlocal_ + (orelse or [ast.Pass()])),
            _def(get_name, [], [ast.Return(value=ast.Tuple(loads, ast.Load()))]),
            _def(set_name, ["__dl_value"], (nonlocal_ + setters) or [ast.Pass()]),
        ]
        labels = outputs + [_label(c) for c in parts]
        call = ast.Call(
            _helper("if_stmt"),
            [
                test,
                ast.Name(t_name, ast.Load()),
                ast.Name(f_name, ast.Load()),
                ast.Name(get_name, ast.Load()),
                ast.Name(set_name, ast.Load()),
                ast.Tuple([ast.Constant(n) for n in labels], ast.Load()),
            ],
            [],
        )
        return defs + [ast.Expr(value=call)] + tail

    # --- expressions ----------------------------------------------------------------------------
    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if any(isinstance(n, ast.NamedExpr) for v in node.values for n in ast.walk(v)):
            return node  # a walrus must bind in this scope, not in a thunk
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        thunks = [_lambda(v) for v in node.values[1:]]
        return ast.Call(_helper(fn), [node.values[0], *thunks], [])

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.Call(_helper("not_"), [node.operand], [])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        node.func = ast.Call(_helper("call"), [node.func], [])
        return node


def _is_docstring(st: ast.stmt) -> bool:
    return (
        isinstance(st, ast.Expr)
        and isinstance(st.value, ast.Constant)
        and isinstance(st.value.value, str)
    )


def _def(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(p) for p in params],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    kw = {"type_params": []} if sys.version_info >= (3, 12) else {}
    return ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None, **kw)


def composites(stmts: list[ast.stmt]) -> list[tuple[str, str, object]]:
    """``(base, "item" | "attr", key)`` of the ``name[constant] = ...`` and ``name.attr = ...``
    targets in the statements' own scope (AutoGraph's composite symbols, one level deep)."""
    found: list = []

    class V(_Assigned):
        def visit_Subscript(self, node):
            if (isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                    and isinstance(node.slice, ast.Constant)):  # fmt: skip
                found.append((node.value.id, "item", node.slice.value))
            self.generic_visit(node)

        def visit_Attribute(self, node):
            if isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
                found.append((node.value.id, "attr", node.attr))
            self.generic_visit(node)

    v = V()
    for st in stmts:
        v.visit(st)
    out = []
    for c in found:
        if c not in out:
            out.append(c)
    return out


def _part(c, ctx) -> ast.expr:
    base, kind, key = c
    if kind == "item":
        return ast.Subscript(value=ast.Name(base, ast.Load()), slice=ast.Constant(key), ctx=ctx)
    return ast.Attribute(value=ast.Name(base, ast.Load()), attr=key, ctx=ctx)


def _label(c) -> str:
    base, kind, key = c
    return f"{base}[{key!r}]" if kind == "item" else f"{base}.{key}"


def _item(i: int) -> ast.expr:
    return ast.Subscript(
        value=ast.Name("__dl_value", ast.Load()), slice=ast.Constant(i), ctx=ast.Load()
    )


def _lambda(expr: ast.expr) -> ast.Lambda:
    args = ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )
    return ast.Lambda(args=args, body=expr)


def _returns_to(stmts: list[ast.stmt], name: str) -> list[ast.stmt]:
    """The block with its final ``return e`` (and those of trailing nested ``if``s that end in
    returns on both sides) turned into ``name = e``."""
    last = stmts[-1]
    if isinstance(last, ast.Return):
        value = last.value if last.value is not None else ast.Constant(None)
        assign = ast.Assign(targets=[ast.Name(name, ast.Store())], value=value)
        return stmts[:-1] + [ast.copy_location(assign, last)]
    last.body = _returns_to(last.body, name)
    last.orelse = _returns_to(last.orelse, name)
    return stmts


# --- compiling -------------------------------------------------------------------------------------


def rewrite_function(func: Callable) -> Callable:
    """Compile the rewritten ``func`` (same globals, closure values, defaults and metadata).

    Raises:
        ValueError: no source, or not a plain ``def`` function.
    """
    from . import _conditionals

    try:
        source = textwrap.dedent(inspect.getsource(func))
        filename = inspect.getsourcefile(func) or "<dlpipe conditionals>"
    except (OSError, TypeError) as e:
        raise ValueError(
            f"enable_conditionals: the source of {func.__qualname__!r} is not available, so its "
            f"`if` statements cannot be rewritten ({e})"
        ) from e
    tree = ast.parse(source)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef | ast.AsyncFunctionDef) or fdef.name != func.__name__:
        raise ValueError(f"enable_conditionals: {func.__qualname__!r} is not a plain function")
    fdef.decorator_list = []  # the decorators already ran on the original
    ast.increment_lineno(tree, func.__code__.co_firstlineno - 1)
    fdef = _Rewriter().visit(fdef)
    freevars = list(func.__code__.co_freevars)
    ret = ast.Return(ast.Name(fdef.name, ast.Load()))
    factory = _def("__dl_factory", [_HELPER, *freevars], [fdef, ret])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, filename, "exec"), func.__globals__, namespace)
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a free variable not bound yet
            cells.append(_conditionals.UNDEFINED)
    new = namespace["__dl_factory"](_Helpers, *cells)
    new.__defaults__ = func.__defaults__
    new.__kwdefaults__ = func.__kwdefaults__
    functools.update_wrapper(new, func)
    new.__dlpipe_converted__ = True
    return new


def _convertible(f) -> bool:
    if not isinstance(f, types.FunctionType) or getattr(f, "__dlpipe_converted__", False):
        return False
    code = f.__code__
    if f.__name__ == "<lambda>" or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return False
    if "__class__" in code.co_freevars:  # zero-argument super() needs the class cell
        return False
    top = (f.__module__ or "").split(".")[0]
    if top in _SKIP_PACKAGES or top in sys.stdlib_module_names:
        return False
    filename = f.__code__.co_filename
    return "site-packages" not in filename and "dist-packages" not in filename


@functools.cache
def _converted(f):
    try:
        return rewrite_function(f)
    except (ValueError, SyntaxError):
        return f  # no source: called as it is


def call(f):
    """What a rewritten call calls: the converted function for user functions and methods."""
    try:
        if _convertible(f):
            return _converted(f)
        if isinstance(f, types.MethodType) and _convertible(f.__func__):
            return types.MethodType(_converted(f.__func__), f.__self__)
    except TypeError:  # unhashable callables
        pass
    return f


class _Helpers:
    """The ``__dl__`` namespace of rewritten functions."""

    @staticmethod
    def undefined(name):
        from ._conditionals import undefined

        return undefined(name)

    @staticmethod
    def if_stmt(*args):
        from ._conditionals import if_stmt

        return if_stmt(*args)

    @staticmethod
    def and_(*args):
        from ._conditionals import and_

        return and_(*args)

    @staticmethod
    def or_(*args):
        from ._conditionals import or_

        return or_(*args)

    @staticmethod
    def not_(a):
        from ._conditionals import not_

        return not_(a)

    @staticmethod
    def read(thunk):
        """An item or attribute, or the undefined marker when it does not exist (yet)."""
        from ._conditionals import UNDEFINED

        try:
            return thunk()
        except (KeyError, IndexError, AttributeError, NameError, TypeError):
            return UNDEFINED

    @staticmethod
    def write(base, kind, key, value):
        """Set (or, for the undefined marker, remove) an item or attribute."""
        from ._conditionals import _Undefined

        if isinstance(value, _Undefined):
            try:
                delattr(base, key) if kind == "attr" else base.__delitem__(key)
            except (KeyError, IndexError, AttributeError, TypeError):
                pass
        elif kind == "attr":
            setattr(base, key, value)
        else:
            base[key] = value

    @staticmethod
    def native_test(value, why):
        from ._conditionals import native_test

        return native_test(value, why)

    call = staticmethod(call)
