"""Compare gradcraft's public signatures with PyTorch's.

A signature is a list of ``(name, kind, default)`` with kind one of ``pos`` (positional or keyword),
``varpos`` (``*args``), ``kwonly`` and ``varkw`` (``**kwargs``). PyTorch's Python functions give theirs through
``inspect.signature``; its C builtins do not, so their documented signature lines (``add(input, other, *,
alpha=1, out=None) -> Tensor``, one line per overload) are parsed instead.
"""

import ast
import inspect
import re

NO_DEFAULT = object()
EXPR = object()  # a default that is not a plain literal (``torch.strided``): never compared


def _literal(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return EXPR


def _from_inspect(sig, drop_first):
    params = list(sig.parameters.values())
    if drop_first and params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "pos",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
        inspect.Parameter.VAR_POSITIONAL: "varpos",
        inspect.Parameter.KEYWORD_ONLY: "kwonly",
        inspect.Parameter.VAR_KEYWORD: "varkw",
    }
    out = []
    for p in params:
        d = p.default
        if d is inspect.Parameter.empty:
            d = NO_DEFAULT
        elif not isinstance(d, (int, float, bool, str, type(None))):
            d = EXPR
        out.append((p.name, kinds[p.kind], d))
    return out


def _split_top(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _parse_line(args):
    out, kwonly = [], False
    for part in _split_top(args.replace("\\*", "*")):
        if part == "*":
            kwonly = True
            continue
        if part.startswith("**"):
            out.append((part[2:], "varkw", NO_DEFAULT))
            continue
        if part.startswith("*"):
            out.append((part[1:].split(":")[0].strip(), "varpos", NO_DEFAULT))
            kwonly = True
            continue
        name, _, default = part.partition("=")
        name = name.split(":")[0].strip()
        if not name.isidentifier():
            return None
        out.append((name, "kwonly" if kwonly else "pos", _literal(default.strip()) if default else NO_DEFAULT))
    return out


def doc_overloads(obj, name):
    """Every signature line for ``name`` in ``obj.__doc__`` (PyTorch lists one per overload)."""
    doc = getattr(obj, "__doc__", None) or ""
    prefix = r"^\s*(?:\.\. (?:function|method):: )?(?:torch\.(?:Tensor\.)?|Tensor\.)?"
    pat = re.compile(prefix + re.escape(name) + r"\((.*?)\)\s*(?:->.*)?$")
    found = []
    for line in doc.splitlines():
        m = pat.match(line)
        if m:
            sig = _parse_line(m.group(1))
            if sig is not None and sig not in found:
                found.append(sig)
    return found


def torch_overloads(obj, name, method):
    """PyTorch's signatures of ``obj`` (a list, one per overload); empty when none can be found."""
    try:
        sig = _from_inspect(inspect.signature(obj), method)
        if [p[1] for p in sig] != ["varpos", "varkw"]:  # a bare (*args, **kwargs) dispatcher says nothing
            return [sig]
    except (ValueError, TypeError):
        pass
    sigs = doc_overloads(obj, name)
    if method:  # a method's own lines are often sparse: the function's lines, less ``out``, count too
        import torch

        fn = getattr(torch, name, None) or getattr(torch, name.rstrip("_"), None)
        if fn is not None and not inspect.isclass(fn):
            for s in doc_overloads(fn, name.rstrip("_")):
                s = [p for p in s if p[0] != "out"]
                if s not in sigs:
                    sigs.append(s)
    if method:  # Tensor method lines sometimes spell the receiver as ``self`` or ``input``
        sigs = [s[1:] if s and s[0][0] in ("self", "input") and s[0][1] == "pos" else s for s in sigs]
    return sigs


def ours(obj, method):
    try:
        return _from_inspect(inspect.signature(obj), method)
    except (ValueError, TypeError):
        return None


def wrapper_problems(obj, method):
    """A wrapper that shows its wrapped function's signature (``__wrapped__``) must accept its names too."""
    try:
        outer = _from_inspect(inspect.signature(obj, follow_wrapped=False), method)
    except (ValueError, TypeError):
        return []
    inner = ours(obj, method)
    if inner is None or outer == inner:
        return []
    return [f"wrapper: {p}" for p in diff(outer, inner)[0]]


def diff(gc, ref):
    """Differences of our signature ``gc`` from PyTorch's ``ref`` as short strings; extras apart.

    Returns ``(problems, extras)``: extras are keyword-only parameters (or any parameter after all of
    PyTorch's) that have a default, which never break a PyTorch call.
    """
    problems, extras = [], []
    gc_pos = [p for p in gc if p[1] == "pos"]
    gc_names = {p[0]: p for p in gc}
    has_varpos = any(p[1] == "varpos" for p in gc)
    has_varkw = any(p[1] == "varkw" for p in gc)
    ref_pos = [p for p in ref if p[1] == "pos"]
    for i, (name, _, default) in enumerate(ref_pos):
        if i < len(gc_pos):
            if gc_pos[i][0] != name:
                problems.append(f"positional {i}: {gc_pos[i][0]!r} for {name!r}")
            elif default is not NO_DEFAULT and gc_pos[i][2] is NO_DEFAULT:
                problems.append(f"{name!r} needs a value (default {default!r})")
            elif _differ(gc_pos[i][2], default):
                problems.append(f"{name!r} default {gc_pos[i][2]!r} for {default!r}")
        elif not has_varpos:
            if name in gc_names and gc_names[name][1] == "kwonly":
                problems.append(f"{name!r} keyword-only")
            else:
                problems.append(f"missing {name!r}")
    for name, kind, default in ref:
        if kind == "kwonly":
            p = gc_names.get(name)
            if p is None:
                if not has_varkw:
                    problems.append(f"missing keyword {name!r}")
            elif p[1] not in ("pos", "kwonly"):
                problems.append(f"{name!r} is {p[1]}")
            elif _differ(p[2], default):
                problems.append(f"{name!r} default {p[2]!r} for {default!r}")
        elif kind == "varpos" and not has_varpos and len(gc_pos) <= len(ref_pos):
            problems.append(f"missing *{name}")
    ref_names = {p[0] for p in ref}
    for i, (name, kind, default) in enumerate(gc):
        if name in ref_names or kind in ("varpos", "varkw"):
            continue
        if default is NO_DEFAULT:
            problems.append(f"extra required {name!r}")
        else:
            extras.append(name)
    return problems, extras


def _differ(a, b):
    if a is EXPR or b is EXPR or a is NO_DEFAULT or b is NO_DEFAULT:
        return False
    if isinstance(a, bool) != isinstance(b, bool):
        return True
    return a != b


def compare(gc_obj, torch_obj, name, method=False):
    """``(status, problems, extras)`` with status ``equal``, ``differ`` or ``skip``."""
    gc = ours(gc_obj, method)
    refs = torch_overloads(torch_obj, name, method)
    if gc is None or not refs:
        return "skip", [], []
    wrapper = wrapper_problems(gc_obj, method)
    if wrapper:
        return "differ", wrapper, []
    best = None
    for ref in refs:
        problems, extras = diff(gc, ref)
        if best is None or len(problems) < len(best[0]):
            best = (problems, extras)
    return ("equal" if not best[0] else "differ"), best[0], best[1]


def _public(mod):
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_")]
    return names


def pairs():
    """``(qualified name, ours, PyTorch's, simple name, is_method)`` for every name both export."""
    import torch
    import torch.distributions
    import torch.nn.functional
    import torch.nn.init
    import torch.nn.utils
    import torch.optim.lr_scheduler
    import torch.utils.data

    import gradcraft
    import gradcraft.distributions
    import gradcraft.nn.functional
    import gradcraft.nn.init
    import gradcraft.nn.utils
    import gradcraft.optim.lr_scheduler
    import gradcraft.utils.data

    out = []

    def funcs(prefix, gmod, tmod):
        for n in _public(gmod):
            g, t = getattr(gmod, n, None), getattr(tmod, n, None)
            if g is None or t is None or inspect.isclass(g) or inspect.ismodule(g) or not callable(g):
                continue
            if not callable(t) or inspect.isclass(t):
                continue
            out.append((f"{prefix}.{n}", g, t, n, False))

    def classes(prefix, gmod, tmod, methods):
        for n in _public(gmod):
            g, t = getattr(gmod, n, None), getattr(tmod, n, None)
            if not (inspect.isclass(g) and inspect.isclass(t)):
                continue
            for m in methods:
                gm, tm = g.__dict__.get(m), getattr(t, m, None)
                if gm is None or tm is None or tm is getattr(object, m, None):
                    continue
                out.append((f"{prefix}.{n}.{m}", gm, tm, m, True))

    funcs("torch", gradcraft, torch)
    funcs("torch.nn.functional", gradcraft.nn.functional, torch.nn.functional)
    funcs("torch.nn.init", gradcraft.nn.init, torch.nn.init)
    funcs("torch.nn.utils", gradcraft.nn.utils, torch.nn.utils)
    classes("torch.nn", gradcraft.nn, torch.nn, ("__init__", "forward"))
    classes("torch.optim", gradcraft.optim, torch.optim, ("__init__", "step", "zero_grad"))
    classes("torch.optim.lr_scheduler", gradcraft.optim.lr_scheduler, torch.optim.lr_scheduler, ("__init__",))
    classes("torch.utils.data", gradcraft.utils.data, torch.utils.data, ("__init__",))
    classes(
        "torch.distributions",
        gradcraft.distributions,
        torch.distributions,
        ("__init__", "sample", "rsample", "log_prob", "entropy"),
    )
    for n in dir(gradcraft.Tensor):
        if n.startswith("_") and n not in ("__getitem__", "__setitem__"):
            continue
        g, t = inspect.getattr_static(gradcraft.Tensor, n, None), getattr(torch.Tensor, n, None)
        if isinstance(g, (staticmethod, classmethod, property)) or not callable(g) or t is None or not callable(t):
            continue
        out.append((f"torch.Tensor.{n}", g, t, n, True))
    return out


def report():
    """``(rows, counts)``: rows are ``(name, status, problems, extras)``."""
    rows = []
    for qual, g, t, n, method in pairs():
        status, problems, extras = compare(g, t, n, method)
        rows.append((qual, status, problems, extras))
    return rows
