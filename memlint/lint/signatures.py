"""A ``def``'s parameters and what a call's arguments bind to them, on ``ast`` nodes.

Every rule and the semantic model ask these questions of a function's
signature (its receiver, its parameter names, a parameter's default, which
parameter an argument of a call lands in); they are answered here once, as
Python binds them (the Language Reference, "Calls": positional arguments
fill the positional-only then the ordinary parameters in order, keywords
fill ordinary and keyword-only parameters by name).

``function`` is an ``ast.FunctionDef``, ``ast.AsyncFunctionDef`` or
``ast.Lambda``; each helper takes either one of those or its ``ast.arguments``.
"""

from __future__ import annotations

import ast

__all__ = ["positional_parameters", "parameter_names", "first_parameter", "parameter_defaults",
           "default_of", "arguments_bound", "is_static_method"]


def _arguments(function: ast.AST) -> ast.arguments | None:
    if isinstance(function, ast.arguments):
        return function
    return getattr(function, "args", None)


def positional_parameters(function: ast.AST) -> list[ast.arg]:
    """The parameters a positional argument can fill: positional-only, then ordinary."""
    arguments = _arguments(function)
    return [*arguments.posonlyargs, *arguments.args] if arguments is not None else []


def parameter_names(function: ast.AST) -> set[str]:
    """The names of the named parameters (positional-only, ordinary,
    keyword-only; not ``*args``/``**kwargs``)."""
    arguments = _arguments(function)
    if arguments is None:
        return set()
    return {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}


def first_parameter(function: ast.AST) -> str | None:
    """The first positional parameter's name (a method's receiver), or None."""
    positional = positional_parameters(function)
    return positional[0].arg if positional else None


def parameter_defaults(function: ast.AST) -> list[tuple[str, ast.expr]]:
    """``(name, default expression)`` of each parameter that has a default,
    in signature order (positional defaults belong to the last positional
    parameters; a keyword-only parameter without one has ``None`` in
    ``kw_defaults`` and is left out)."""
    arguments = _arguments(function)
    if arguments is None:
        return []
    positional = positional_parameters(arguments)
    with_default = positional[len(positional) - len(arguments.defaults):]
    pairs = [(parameter.arg, default) for parameter, default in zip(with_default, arguments.defaults)]
    pairs.extend((parameter.arg, default) for parameter, default in zip(arguments.kwonlyargs, arguments.kw_defaults)
                 if default is not None)
    return pairs


def default_of(function: ast.AST, name: str) -> ast.expr | None:
    """The default expression of parameter ``name``, or None when it has none."""
    return next((default for parameter, default in parameter_defaults(function) if parameter == name), None)


def arguments_bound(call: ast.Call, function: ast.AST, *, skip_receiver: bool) -> dict[str, ast.expr]:
    """The argument expression of ``call`` that each parameter of
    ``function`` receives, by position and keyword. ``skip_receiver``: the
    call is on an object (``obj.method(...)``), so the first positional
    parameter is the object, not the first argument. A starred argument
    stops the positional match (its length is unknown); ``*args`` and
    ``**kwargs`` are not bound."""
    arguments = _arguments(function)
    positional = [a.arg for a in positional_parameters(arguments)]
    if skip_receiver:
        positional = positional[1:]
    bound: dict[str, ast.expr] = {}
    for name, argument in zip(positional, call.args):
        if isinstance(argument, ast.Starred):
            break
        bound[name] = argument
    names = set(positional) | {a.arg for a in arguments.kwonlyargs}
    for keyword in call.keywords:
        if keyword.arg in names:
            bound[keyword.arg] = keyword.value
    return bound


def is_static_method(function: ast.AST) -> bool:
    """``function`` is decorated ``@staticmethod`` (or ``@builtins.staticmethod``):
    no receiver fills its first parameter."""
    for decorator in getattr(function, "decorator_list", ()):
        if isinstance(decorator, ast.Name) and decorator.id == "staticmethod":
            return True
        if isinstance(decorator, ast.Attribute) and decorator.attr == "staticmethod" \
                and isinstance(decorator.value, ast.Name) and decorator.value.id == "builtins":
            return True
    return False
