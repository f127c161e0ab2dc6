"""Whether a variant on disk is the fresh translation up to what a code formatter changes.

Repositories that keep Triton kernels usually run `ruff format` or `black` in the same pre-commit configuration as
`transpile`. A formatter rewrites the layout of the variant (line breaks, parentheses, quotes, blank lines, spacing
before comments) but not its syntax tree, nor its comments. The variant is current when it is the fresh translation
byte for byte, or when both have the same syntax tree (docstrings compared as `inspect.cleandoc` gives them) and the
same comments in the same order: then `--check` passes and a write leaves the formatted file alone, so the two hooks
settle after one round instead of rewriting each other's output on every commit. A hand edit that changes code or a
comment is still stale.
"""

from __future__ import annotations

import ast
import inspect
import io
import tokenize


def same_code(existing: str, fresh: str) -> bool:
    """`existing` is `fresh`, or `fresh` after a formatter (see the module docstring)."""
    if existing == fresh:
        return True
    try:
        return _tree(existing) == _tree(fresh) and _comments(existing) == _comments(fresh)
    except (SyntaxError, ValueError, tokenize.TokenError):
        return False


def _tree(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body[0].value.value = inspect.cleandoc(body[0].value.value)  # formatters re-indent docstrings
    return ast.dump(tree, include_attributes=False)


def _comments(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [" ".join(t.string.split()) for t in tokens if t.type == tokenize.COMMENT]
