"""Every test can fail (issue 39): an AST walk of tests/ for tests that check nothing, or only what always holds.

A test checks something when it (or a helper it calls, or a fixture it takes) has an `assert`, a
`pytest.raises`/`pytest.warns`/`pytest.fail`, a `raise AssertionError`, or calls a function named
`assert_*`/`check_*`/`expect_*` (`np.testing.assert_*` included). Helpers are resolved by name in the same
module, its test class (`self.f`), the modules of tests/ it imports (`from loader_checks import f`,
`import study_frames`), and fixtures by parameter name in the module and the conftest.py files above it.
A test whose own assertions are all of the forms that cannot fail on a behaviour (`0 <= x <= 1`, a
`>= 0`, `is not None`, `isinstance`) and that calls no checking helper is flagged too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CHECK_PREFIXES = ("assert_", "check_", "expect_")
PYTEST_CHECKS = {"raises", "warns", "fail", "deprecated_call"}

# Tests this checker flags in files others own: each is being fixed in issue 39 by a teammate.
ALLOWED: dict[str, str] = {
}


@dataclass
class Module:
    """One parsed file of tests/: its functions, test classes' methods, fixtures and imports of test helpers."""

    path: Path
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    methods: dict[str, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=dict)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (helper module, function)
    modules: dict[str, str] = field(default_factory=dict)  # local name -> helper module

    @property
    def rel(self) -> str:
        return self.path.relative_to(TESTS.parent).as_posix()


Function = ast.FunctionDef | ast.AsyncFunctionDef


@cache
def modules() -> dict[Path, Module]:
    """Every .py file under tests/, parsed."""
    return {path: _parse(path) for path in sorted(TESTS.rglob("*.py"))}


@cache
def by_stem() -> dict[str, Module]:
    """Helper modules by import name (tests/ and tests/services/ are on sys.path: names are unique)."""
    return {path.stem: module for path, module in modules().items()}


def _parse(path: Path) -> Module:
    tree = ast.parse(path.read_text(), str(path))
    module = Module(path)
    for node in tree.body:
        if isinstance(node, Function):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            module.methods[node.name] = {n.name: n for n in node.body if isinstance(n, Function)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            stem = node.module.rsplit(".", 1)[-1]
            if node.module.split(".")[0] in ("tests", stem):
                for alias in node.names:
                    module.names[alias.asname or alias.name] = (stem, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tests" or "." not in alias.name:
                    module.modules[alias.asname or alias.name.rsplit(".", 1)[-1]] = alias.name.rsplit(".", 1)[-1]
    return module


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_pytest_check(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in PYTEST_CHECKS and isinstance(func.value, ast.Name)
            and func.value.id == "pytest")


def _raises_assertion(node: ast.Raise) -> bool:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "AssertionError"


def _helper(call: ast.Call, module: Module, cls: str | None) -> tuple[Module, Function, str | None] | None:
    """The tests/ function a call names, if it is one: same module, same class, or an imported helper."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in module.functions:
            return module, module.functions[func.id], None
        if func.id in module.names:
            stem, name = module.names[func.id]
            other = by_stem().get(stem)
            if other is not None and name in other.functions:
                return other, other.functions[name], None
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = func.value.id
        if owner == "self" and cls is not None and func.attr in module.methods.get(cls, {}):
            return module, module.methods[cls][func.attr], cls
        other = by_stem().get(module.modules.get(owner, ""))
        if other is not None and func.attr in other.functions:
            return other, other.functions[func.attr], None
    return None


def _fixtures(module: Module) -> dict[str, tuple[Module, Function]]:
    """Fixtures a test of `module` can take by name: the conftest.py files above it first, then its own."""
    found: dict[str, tuple[Module, Function]] = {}
    folders = [p for p in module.path.parents if p == TESTS or TESTS in p.parents][::-1]
    for source in [modules().get(folder / "conftest.py") for folder in folders] + [module]:
        for name, fn in (source.functions if source else {}).items():
            if any(_decorator_name(d) == "fixture" for d in fn.decorator_list):
                found[name] = (source, fn)  # type: ignore[assignment]
    return found


def _decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def checks(fn: Function, module: Module, cls: str | None = None, seen: frozenset[int] = frozenset()) -> bool:
    """Whether `fn`, or any tests/ helper it calls, checks something (see the module docstring)."""
    if id(fn) in seen:
        return False
    seen = seen | {id(fn)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert) or (isinstance(node, ast.Raise) and _raises_assertion(node)):
            return True
        if isinstance(node, ast.Call):
            if _is_pytest_check(node) or _call_name(node).startswith(CHECK_PREFIXES):
                return True
            helper = _helper(node, module, cls)
            if helper is not None and checks(helper[1], helper[0], helper[2], seen):
                return True
    return False


def _weak(test: ast.expr) -> bool:
    """An assertion that holds for any value of its kind: `0 <= x <= 1`, `x >= 0`, `x is not None`, isinstance."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(_weak(v) for v in test.values)
    if isinstance(test, ast.Call):
        return isinstance(test.func, ast.Name) and test.func.id == "isinstance"
    if not isinstance(test, ast.Compare):
        return False
    if len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot):
        return isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
    values = [test.left, *test.comparators]
    zero = [isinstance(v, ast.Constant) and v.value == 0 for v in values]
    one = isinstance(values[-1], ast.Constant) and values[-1].value == 1
    if len(test.ops) == 2 and all(isinstance(op, ast.LtE | ast.Lt) for op in test.ops):
        return zero[0] and one  # 0 <= x <= 1
    if len(test.ops) == 1:  # x >= 0, 0 <= x
        return (isinstance(test.ops[0], ast.GtE) and zero[1]) or (isinstance(test.ops[0], ast.LtE) and zero[0])
    return False


def only_weak(fn: Function, module: Module, cls: str | None) -> bool:
    """Whether every check of the test itself is a weak assertion (and it calls no checking helper)."""
    asserts = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            asserts.append(node)
        elif isinstance(node, ast.Raise) and _raises_assertion(node):
            return False
        elif isinstance(node, ast.Call):
            if _is_pytest_check(node) or _call_name(node).startswith(CHECK_PREFIXES):
                return False
            helper = _helper(node, module, cls)
            if helper is not None and checks(helper[1], helper[0], helper[2]):
                return False
    return bool(asserts) and all(_weak(a.test) for a in asserts)


def _tests_of(module: Module) -> list[tuple[str, Function, str | None]]:
    """(name as pytest shows it, function, class) of each test function of a test_*.py module."""
    if not module.path.name.startswith("test_"):
        return []
    found = [(name, fn, None) for name, fn in module.functions.items() if name.startswith("test")]
    for cls, methods in module.methods.items():
        if cls.startswith("Test"):
            found += [(f"{cls}::{name}", fn, cls) for name, fn in methods.items() if name.startswith("test")]
    return found


NO_CHECK = "no assert, pytest.raises/warns or checking helper"
WEAK = "its only assertions always hold (0 <= x <= 1, >= 0, is not None, isinstance)"


def verdict(fn: Function, module: Module, cls: str | None, fixtures: dict[str, tuple[Module, Function]]) -> str:
    """Why a test cannot fail on what it names ("" when it can)."""
    if any(checks(f, m) for m, f in (fixtures[a.arg] for a in fn.args.args if a.arg in fixtures)):
        return ""
    return NO_CHECK if not checks(fn, module, cls) else WEAK if only_weak(fn, module, cls) else ""


def findings() -> dict[str, str]:
    """file::name -> why, for each test that cannot fail on what it names."""
    found = {}
    for module in modules().values():
        fixtures = _fixtures(module)
        for name, fn, cls in _tests_of(module):
            why = verdict(fn, module, cls, fixtures)
            if why:
                found[f"{module.rel}::{name}"] = why
    return found


def test_every_test_can_fail():
    flagged = {key: why for key, why in findings().items() if key not in ALLOWED}
    assert not flagged, "tests that cannot fail on what they name:\n" + "\n".join(
        f"  {key}: {why}" for key, why in sorted(flagged.items()))


def test_allowlist_names_only_tests_still_flagged():
    """An allowlisted test that got fixed (or renamed) leaves the list, so the list never hides a new one."""
    assert sorted(set(ALLOWED) - set(findings())) == []


def _findings_of(source: str) -> dict[str, str]:
    """name -> "none" (checks nothing) or "weak" (only what always holds), for the tests of a module's text."""
    module = Module(TESTS / "unit" / "test_can_fail_probe.py")  # parsed from `source`, never written
    tree = ast.parse(source)
    module.functions = {n.name: n for n in tree.body if isinstance(n, Function)}
    module.methods = {c.name: {n.name: n for n in c.body if isinstance(n, Function)}
                      for c in tree.body if isinstance(c, ast.ClassDef)}
    fixtures = _fixtures(module)
    short = {NO_CHECK: "none", WEAK: "weak"}
    return {name: short[why] for name, fn, cls in _tests_of(module) if (why := verdict(fn, module, cls, fixtures))}


def test_checker_tells_checking_tests_from_the_rest():
    source = '''
def helper(x):
    assert x == 2

def quiet(x):
    print(x)

def test_none():
    print(1.5)

def test_printed_timing():
    quiet(3)

def test_range():
    ratio = 0.5
    assert 0 <= ratio <= 1.0

def test_weak_mix():
    assert isinstance(1, int) and 1 is not None
    assert 3 >= 0

def test_real():
    assert 1 + 1 == 2

def test_helper():
    helper(2)

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_np():
    np.testing.assert_array_equal([1], [1])

def test_range_and_real():
    assert 0.0 <= 0.3 <= 1.0
    assert 0.3 > 0.2

@pytest.fixture
def checked():
    yield 3
    assert False

@pytest.fixture
def unchecked():
    return 3

def test_fixture_checks(checked):
    print(checked)

def test_fixture_checks_nothing(unchecked):
    assert unchecked is not None

class TestGroup:
    def check(self, x):
        assert x == 1

    def test_method_helper(self):
        self.check(1)

    def test_method_none(self):
        print(1)
'''
    assert _findings_of(source) == {"test_none": "none", "test_printed_timing": "none", "test_range": "weak",
                                    "test_weak_mix": "weak", "test_fixture_checks_nothing": "weak",
                                    "TestGroup::test_method_none": "none"}


if __name__ == "__main__":
    for key, why in sorted(findings().items()):
        print(f"{key}: {why}{'  [allowed]' if key in ALLOWED else ''}")
