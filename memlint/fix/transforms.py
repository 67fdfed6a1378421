"""The libcst transforms that the rules' fixes are made of.

Each transform takes the node a :class:`~memlint.lint.diagnostic.FixPlan`
names (as it is after the transforms of nodes inside it) and the plan, and
returns the node's replacement: a node, several statements
(``FlattenSentinel``) or a removal. :class:`Inapplicable` means the node
is not one the transform can rewrite safely; the whole fix is then not
offered. Code given in a plan's parameters (``code``) is parsed by libcst,
so a transform never splices text: libcst lays out commas, parentheses,
indentation and line ends, and keeps the comments of the nodes it keeps.

:data:`TRANSFORMS` maps a plan's ``kind`` to its transform and the libcst
node classes it applies to (which tell :class:`~memlint.fix.locate.NodeIndex`
which of the nodes sharing a span is meant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import libcst
from libcst import MaybeSentinel

from memlint.lint.diagnostic import FixPlan


class Inapplicable(Exception):
    """The transform does not apply to the node found (the fix is not offered)."""


@dataclass(frozen=True)
class Transform:
    """One kind of fix: the function and the node classes it rewrites."""

    apply: Callable[[libcst.CSTNode, FixPlan], object]
    node_types: tuple[type, ...]


#: Expressions that take a trailer (``.name()``) without parentheses around
#: them; anything else (an operation, a lambda, a number: ``1 .cpu``) is
#: parenthesised first.
_ATOMS = (libcst.Name, libcst.Attribute, libcst.Call, libcst.Subscript, libcst.SimpleString,
          libcst.ConcatenatedString, libcst.FormattedString, libcst.List, libcst.Tuple, libcst.Dict,
          libcst.Set, libcst.ListComp, libcst.SetComp, libcst.DictComp, libcst.GeneratorExp)


def _parse_expression(code: object) -> libcst.BaseExpression:
    if not isinstance(code, str):
        raise Inapplicable("no code")
    try:
        return libcst.parse_expression(code)
    except libcst.ParserSyntaxError as exc:
        raise Inapplicable(f"code does not parse: {exc.message}") from exc


def _parse_statements(code: object) -> list[libcst.BaseStatement]:
    if not isinstance(code, str):
        raise Inapplicable("no code")
    try:
        return list(libcst.parse_module(code).body)
    except libcst.ParserSyntaxError as exc:
        raise Inapplicable(f"code does not parse: {exc.message}") from exc


# -- expressions -----------------------------------------------------------------
def replace_expression(node: libcst.BaseExpression, plan: FixPlan) -> libcst.BaseExpression:
    """``node`` replaced by the expression ``code`` (the parentheses around ``node`` kept)."""
    new = _parse_expression(plan.param("code"))
    if node.lpar and not new.lpar:
        new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
    return new


def call_method(node: libcst.BaseExpression, plan: FixPlan) -> libcst.Call:
    """``node.<method>()`` (``x`` -> ``x.detach()``, ``a + b`` -> ``(a + b).detach()``)."""
    method = plan.param("method")
    if not isinstance(method, str) or not method.isidentifier():
        raise Inapplicable("no method name")
    if not node.lpar and not isinstance(node, _ATOMS):
        node = node.with_changes(lpar=[libcst.LeftParen()], rpar=[libcst.RightParen()])
    return libcst.Call(func=libcst.Attribute(value=node, attr=libcst.Name(method)))


def remove_argument(node: libcst.Call, plan: FixPlan) -> libcst.Call:
    """The call without its argument number ``index`` (0-based); the new last
    argument loses its comma unless the call had a trailing comma."""
    index = plan.param("index")
    args = list(node.args)
    if not isinstance(index, int) or not 0 <= index < len(args):
        raise Inapplicable("no such argument")
    removed = args.pop(index)
    if args and index == len(args):  # the last one: the new last takes over its layout up to ")"
        previous = args[-1]
        if isinstance(removed.comma, libcst.Comma) and isinstance(previous.comma, libcst.Comma):
            args[-1] = previous.with_changes(comma=previous.comma.with_changes(
                whitespace_after=removed.comma.whitespace_after))
        else:
            args[-1] = previous.with_changes(comma=MaybeSentinel.DEFAULT, whitespace_after_arg=removed.whitespace_after_arg)
    return node.with_changes(args=args)


def rewrite_call(node: libcst.Call, plan: FixPlan) -> libcst.Call:
    """The call of ``callee`` (dotted code) with the positional argument
    ``first`` (code) put first and, when ``keywords`` is given, the existing
    positional arguments turned into the keywords it names (in order); the
    other arguments, their comments and layout, are kept."""
    callee = _parse_expression(plan.param("callee"))
    names = plan.param("keywords")
    args = list(node.args)
    positional = [a for a in args if a.keyword is None and not a.star]
    if any(a.star for a in args) or (names is not None and len(positional) > len(names)):
        raise Inapplicable("starred or too many positional arguments")
    rewritten, position = [], 0
    for arg in args:
        if arg.keyword is None and names is not None:
            arg = arg.with_changes(keyword=libcst.Name(names[position]), equal=libcst.AssignEqual(
                whitespace_before=libcst.SimpleWhitespace(""), whitespace_after=libcst.SimpleWhitespace("")))
            position += 1
        rewritten.append(arg)
    first = plan.param("first")
    if first is not None:
        comma = libcst.Comma(whitespace_after=libcst.SimpleWhitespace(" ")) if rewritten else MaybeSentinel.DEFAULT
        rewritten.insert(0, libcst.Arg(value=_parse_expression(first), comma=comma))
    return node.with_changes(func=callee, args=rewritten)


def add_keyword(node: libcst.Call, plan: FixPlan) -> libcst.Call:
    """The call with ``keyword=code`` as its last argument, laid out as the
    call is: ``f(a)`` -> ``f(a, k=v)``; one argument per line with a
    trailing comma -> the new one on its own line with a trailing comma."""
    new = libcst.Arg(keyword=libcst.Name(str(plan.param("keyword"))), value=_parse_expression(plan.param("code")),
                     equal=libcst.AssignEqual(whitespace_before=libcst.SimpleWhitespace(""),
                                              whitespace_after=libcst.SimpleWhitespace("")))
    args = list(node.args)
    if any(a.keyword is not None and a.keyword.value == plan.param("keyword") for a in args):
        raise Inapplicable("the keyword is already given")
    if not args:
        return node.with_changes(args=[new])
    last = args[-1]
    if last.star == "**" or isinstance(last.comma, libcst.Comma):
        if last.star == "**":
            raise Inapplicable("a keyword after **kwargs is allowed but hides nothing; left to the user")
        gap = args[-2].comma.whitespace_after if len(args) > 1 else node.whitespace_before_args
        args[-1], closing = _split_trailing_comma(last, gap)
        args.append(new.with_changes(comma=closing))
    else:
        args[-1] = last.with_changes(comma=libcst.Comma(whitespace_after=libcst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=libcst.SimpleWhitespace(""))
        args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return node.with_changes(args=args)


def _split_trailing_comma(last: libcst.Arg, gap) -> tuple[libcst.Arg, libcst.Comma]:
    """``last`` with a comma followed by the layout ``gap`` that precedes
    the arguments before it (its comment kept), and the trailing comma for
    the new last argument (the layout up to ``)``)."""
    after = last.comma.whitespace_after
    if not isinstance(after, libcst.ParenthesizedWhitespace):
        return last.with_changes(comma=last.comma.with_changes(whitespace_after=libcst.SimpleWhitespace(" "))), last.comma
    indent = gap.last_line if isinstance(gap, libcst.ParenthesizedWhitespace) else after.last_line
    kept = after.with_changes(last_line=indent, indent=True)
    closing = libcst.Comma(whitespace_after=after.with_changes(first_line=libcst.TrailingWhitespace(), empty_lines=[]))
    return last.with_changes(comma=last.comma.with_changes(whitespace_after=kept)), closing


# -- statements --------------------------------------------------------------------
#: Marks a statement that its block drops (see :class:`~memlint.fix.engine.Apply`).
REMOVED = libcst.RemovalSentinel.REMOVE


def remove_statement(node: libcst.SimpleStatementLine, plan: FixPlan):
    """The statement line removed (its block keeps the comments above it,
    and gets ``pass`` if nothing else is left: see the engine)."""
    return REMOVED


def remove_import_name(node: libcst.SimpleStatementLine, plan: FixPlan):
    """The import line without the name bound as ``name``; the whole line
    when no name is left."""
    name = plan.param("name")
    if len(node.body) != 1 or not isinstance(node.body[0], (libcst.Import, libcst.ImportFrom)):
        raise Inapplicable("not a line holding one import")
    statement = node.body[0]
    if isinstance(statement.names, libcst.ImportStar):
        raise Inapplicable("star import")
    kept = [alias for alias in statement.names if _bound_name(alias) != name]
    if len(kept) == len(statement.names):
        raise Inapplicable("the name is not imported there")
    if not kept:
        return REMOVED
    if isinstance(kept[-1].comma, libcst.Comma) and not getattr(statement, "rpar", None):
        kept[-1] = kept[-1].with_changes(comma=MaybeSentinel.DEFAULT)
    return node.with_changes(body=[statement.with_changes(names=kept)])


def _bound_name(alias: libcst.ImportAlias) -> str:
    if alias.asname is not None:
        return libcst.Module([]).code_for_node(alias.asname.name)
    return libcst.Module([]).code_for_node(alias.name).split(".")[0]


def append_semicolon(node: libcst.Expr, plan: FixPlan) -> libcst.Expr:
    """``value;`` (IPython then neither shows nor caches the cell's value)."""
    if not isinstance(node.semicolon, MaybeSentinel):
        raise Inapplicable("already ends with a semicolon")
    return node.with_changes(semicolon=libcst.Semicolon(whitespace_before=libcst.SimpleWhitespace(""),
                                                        whitespace_after=libcst.SimpleWhitespace("")))


def insert_after(node: libcst.SimpleStatementLine, plan: FixPlan) -> libcst.FlattenSentinel:
    """The statement line followed by the statements ``code``."""
    return libcst.FlattenSentinel([node, *_parse_statements(plan.param("code"))])


def prepend_to_body(node, plan: FixPlan):
    """The loop (or function) with the statements ``code`` at the start of its
    body, before the first statement and the comments above it."""
    body = node.body
    if not isinstance(body, libcst.IndentedBlock):
        raise Inapplicable("a one-line body")
    return node.with_changes(body=body.with_changes(body=[*_parse_statements(plan.param("code")), *body.body]))


def wrap_in_with(node, plan: FixPlan) -> libcst.With:
    """``with <code>:`` around the statement, which is indented one level
    deeper (libcst re-indents it, comments included); the comments above it
    stay above the ``with``."""
    item = libcst.WithItem(item=_parse_expression(plan.param("code")))
    inner = node.with_changes(leading_lines=[])
    return libcst.With(items=[item], body=libcst.IndentedBlock(body=[inner]), leading_lines=node.leading_lines)


def add_decorator(node: libcst.FunctionDef, plan: FixPlan) -> libcst.FunctionDef:
    """The function with the decorator ``code`` nearest to ``def`` (so it
    wraps the function itself, under ``@staticmethod`` and the like)."""
    decorator = libcst.Decorator(decorator=_parse_expression(plan.param("code")))
    return node.with_changes(decorators=[*node.decorators, decorator])


_EXPRESSION = (libcst.BaseExpression,)
_LINE = (libcst.SimpleStatementLine,)
_BLOCK_OWNERS = (libcst.For, libcst.While, libcst.FunctionDef, libcst.With)

#: kind -> transform; the kinds rules name in their :class:`FixPlan`.
TRANSFORMS: dict[str, Transform] = {
    "replace_expression": Transform(replace_expression, _EXPRESSION),
    "call_method": Transform(call_method, _EXPRESSION),
    "remove_argument": Transform(remove_argument, (libcst.Call,)),
    "rewrite_call": Transform(rewrite_call, (libcst.Call,)),
    "add_keyword": Transform(add_keyword, (libcst.Call,)),
    "remove_statement": Transform(remove_statement, _LINE),
    "remove_import_name": Transform(remove_import_name, _LINE),
    "append_semicolon": Transform(append_semicolon, (libcst.Expr,)),
    "insert_after": Transform(insert_after, _LINE),
    "prepend_to_body": Transform(prepend_to_body, _BLOCK_OWNERS),
    "wrap_in_with": Transform(wrap_in_with, (libcst.For, libcst.While)),
    "add_decorator": Transform(add_decorator, (libcst.FunctionDef,)),
}
