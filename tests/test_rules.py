"""Each rewrite rule's own before/after examples (`Rule.examples`), run through the whole translator.

An example holds a module (`before`) and lines (`after`): each `after` line, with leading whitespace stripped, must
appear in a line of `translate_source(before, "x.py", get_target(example.target)).text` (also stripped). Several
examples give the start of a long line only, so a line matches where it contains the expected text.
The rules are collected from the targets' rule lists, so a rule no target uses is reported too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import transpile.rules
from transpile.engine import translate_source
from transpile.rules.base import Counterexample, Example, Rule
from transpile.targets import all_targets, get_target


def _rules_in_targets() -> dict[type[Rule], list[str]]:
    """Rule class -> names of the targets that use it, in the targets' order."""
    used: dict[type[Rule], list[str]] = {}
    for target in all_targets():
        for rule in target.rules:
            used.setdefault(type(rule), []).append(target.name)
    return used


def _rule_classes_in_package() -> set[type[Rule]]:
    classes: set[type[Rule]] = set()
    for module_info in pkgutil.iter_modules(transpile.rules.__path__):
        module = importlib.import_module(f"transpile.rules.{module_info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Rule) and cls is not Rule and cls.__module__ == module.__name__:
                classes.add(cls)
    return classes


RULES = _rules_in_targets()

# Examples that do not hold with the translator as it is (see the final report of the test-suite work):


def _example_params() -> list[object]:
    params = []
    for cls in RULES:
        for index, example in enumerate(cls.examples):
            case = f"{cls.name}[{index}]"
            params.append(pytest.param(cls, example, id=f"{case}-{example.target}"))
    return params


@pytest.mark.parametrize(("rule", "example"), _example_params())
def test_rule_example(rule: type[Rule], example: Example) -> None:
    result = translate_source(example.before, "x.py", get_target(example.target), gluon_always=True)
    lines = [line.strip() for line in result.text.splitlines()]
    missing = [after for after in example.after if not any(after.strip() in line for line in lines)]
    assert not missing, (f"rule `{rule.name}` for {example.target}: expected lines not in the output:\n  "
                         + "\n  ".join(missing) + "\n--- output ---\n" + result.text)


def _counterexample_params() -> list[object]:
    return [pytest.param(cls, example, id=f"{cls.name}[{index}]-{example.target}")
            for cls in RULES for index, example in enumerate(cls.counterexamples)]


@pytest.mark.parametrize(("rule", "example"), _counterexample_params())
def test_rule_counterexample(rule: type[Rule], example: Counterexample) -> None:
    """The rule leaves the module alone: none of the lines its rewrite writes, and the diagnostic naming why."""
    result = translate_source(example.before, "x.py", get_target(example.target), gluon_always=example.gluon_always)
    lines = [line.strip() for line in result.text.splitlines()]
    written = [absent for absent in example.absent if any(absent.strip() in line for line in lines)]
    assert not written, (f"rule `{rule.name}` for {example.target} rewrote a counterexample:\n  " + "\n  ".join(written)
                         + "\n--- output ---\n" + result.text)
    if example.code:
        assert any(d.code == example.code and example.reason in d.message for d in result.diagnostics), (
            f"rule `{rule.name}` for {example.target}: no {example.code} saying {example.reason!r}:\n  "
            + "\n  ".join(d.format() for d in result.diagnostics))


def test_every_rule_is_used_by_a_target() -> None:
    unused = {cls.__name__ for cls in _rule_classes_in_package()} - {cls.__name__ for cls in RULES}
    assert not unused, f"rules defined in transpile/rules/ that no target lists: {sorted(unused)}"


@pytest.mark.parametrize("rule", list(RULES), ids=lambda cls: cls.name or cls.__name__)
def test_rule_describes_itself(rule: type[Rule]) -> None:
    """Each rule states what it matches and emits, and carries an example and a counterexample for a target that
    uses it."""
    assert rule.name and rule.matches and rule.emits
    assert rule.examples, f"rule `{rule.name}` has no examples"
    assert rule.counterexamples, f"rule `{rule.name}` has no counterexamples (a module it must leave alone)"
    for example in rule.examples:
        assert example.target in RULES[rule], f"example for {example.target}, which does not use `{rule.name}`"
        assert example.after, "an example with no expected lines checks nothing"
    for counter in rule.counterexamples:
        assert counter.target in RULES[rule], f"counterexample for {counter.target}, which does not use `{rule.name}`"
        assert counter.absent, "a counterexample with no absent lines checks nothing"


def test_rule_names_are_unique() -> None:
    names = [cls.name for cls in RULES]
    assert len(names) == len(set(names))


MATH_NAMESPACE = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
    "    offs = tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, tl.math.exp(tl.load(x_ptr + offs)))\n"
)


def test_math_namespace_is_translated() -> None:
    """`tl.math.exp(x)` is `gl.exp(x)`, as `tl.exp(x)` is."""
    result = translate_source(MATH_NAMESPACE, "x.py", get_target("gfx942"))
    assert result.diagnostics == []
    assert "gl.store(x_ptr + offs, gl.exp(gl.load(x_ptr + offs)))" in result.text


def test_exp_is_translated() -> None:
    result = translate_source(MATH_NAMESPACE.replace("tl.math.exp", "tl.exp"), "x.py", get_target("gfx942"))
    assert result.diagnostics == []
    assert "gl.store(x_ptr + offs, gl.exp(gl.load(x_ptr + offs)))" in result.text
