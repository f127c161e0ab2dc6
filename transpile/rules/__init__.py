"""Rewrite rules: one rewrite per module.

A rule is a small object with ``leave_*`` hooks that the kernel rewriter calls in order for each node of a jit
function. A hook receives the node of the *source* tree (to look facts up) and the node built so far (to return a
rewritten one). Each rule names what it matches, what it emits, the targets that use it, and carries before/after
examples that ``tests/test_rules.py`` runs.
"""

from transpile.rules.base import Example, Rule, RuleContext

__all__ = ["Example", "Rule", "RuleContext"]
