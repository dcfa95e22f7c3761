"""The mutants of one module: one-line changes found by walking its syntax tree (pure; no files written).

Operators (each a change confined to one source line, so that the line's coverage says which tests can see it):
comparison flips (`<` and `<=`, `>` and `>=`, `==` and `!=`, `in` and `not in`, `is` and `is not`), `and` and
`or` swapped, `not x` made `x`, an `if`/`while` condition negated, an integer constant plus one, `True` and
`False` swapped, `+` and `-` swapped, and a statement removed (a call made for its effect, an augmented
assignment, a `raise`) by putting `pass` in its place.

Left out on purpose, since a change there is equivalent or not a behaviour: annotations, decorators, the
`if TYPE_CHECKING:` block, f-strings (Python 3.11 gives their inner nodes no usable columns), module-level
constants in capitals (the defaults of bounds; the settings' own tests pin them), and calls to a logger.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

_COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_LOGGER_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})


@dataclass(frozen=True, slots=True)
class Mutant:
    """`original` at `line` (1-based), columns `col` to `end_col` (characters), becomes `replacement`."""

    path: str
    line: int
    col: int
    end_col: int
    original: str
    replacement: str
    operator: str

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        text = lines[self.line - 1]
        assert text[self.col : self.end_col] == self.original, (self, text)
        lines[self.line - 1] = text[: self.col] + self.replacement + text[self.end_col :]
        return "".join(lines)

    def describe(self) -> str:
        return f"{self.path}:{self.line} [{self.operator}] {self.original!r} -> {self.replacement!r}"


def _character_column(line_text: str, byte_offset: int) -> int:
    # ast's columns count UTF-8 bytes; the mutant's count characters.
    return len(line_text.encode()[:byte_offset].decode())


def _is_logger_call(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    target = node.func.value
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
    return node.func.attr in _LOGGER_METHODS and "log" in name.lower()


def _whole_subtree_skipped(node: ast.AST) -> bool:
    if isinstance(node, ast.If):
        return "TYPE_CHECKING" in ast.unparse(node.test)
    if isinstance(node, ast.Expr):
        return _is_logger_call(node.value)
    return isinstance(node, ast.JoinedStr)


def _skipped_subtrees(tree: ast.Module) -> set[int]:
    """The ids of the nodes whose whole subtree takes no mutant (see the module's docstring)."""
    skipped: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.AnnAssign, ast.arg)) and node.annotation is not None:
            skipped.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skipped.extend(node.decorator_list)
            if node.returns is not None:
                skipped.append(node.returns)
        elif isinstance(node, ast.ClassDef):
            skipped.extend(node.decorator_list)
            skipped.extend(node.bases)
        elif _whole_subtree_skipped(node):
            skipped.append(node)
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(target, ast.Name) and target.id.isupper() for target in targets):
            skipped.append(node)
    return {id(inner) for node in skipped for inner in ast.walk(node)}


def _replacement(node: ast.AST) -> tuple[str, str] | None:
    """(operator name, new text) for a node that takes a mutant, else None."""
    if isinstance(node, ast.Compare):
        flipped = type(node.ops[0])
        if flipped not in _COMPARE_FLIPS:
            return None
        changed = ast.Compare(node.left, [_COMPARE_FLIPS[flipped](), *node.ops[1:]], node.comparators)
        return f"compare {type(node.ops[0]).__name__}", f"({ast.unparse(changed)})"
    if isinstance(node, ast.BoolOp):
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return f"boolop {type(node.op).__name__}", f"({ast.unparse(ast.BoolOp(other, node.values))})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return "not removed", f"({ast.unparse(node.operand)})"
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return "bool flipped", repr(not node.value)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return "int plus one", repr(node.value + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        other_op: ast.operator = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return f"binop {type(node.op).__name__}", f"({ast.unparse(ast.BinOp(node.left, other_op, node.right))})"
    if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await)):
        return "call removed", "pass"
    if isinstance(node, (ast.AugAssign, ast.Raise)):
        return f"{type(node).__name__} removed", "pass"
    return None


def module_mutants(path: str, source: str) -> list[Mutant]:
    """Every mutant of one module, in source order; each one compiles and changes the syntax tree."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    skipped = _skipped_subtrees(tree)
    original_dump = ast.dump(tree)
    conditions = {
        id(node.test) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.While)) and id(node) not in skipped
    }
    found: list[Mutant] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.expr, ast.stmt)) or id(node) in skipped or node.lineno != node.end_lineno:
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        text = lines[node.lineno - 1]
        col = _character_column(text, node.col_offset)
        end_col = _character_column(text, node.end_col_offset or node.col_offset)
        original = text[col:end_col]
        options = []
        found_replacement = _replacement(node)
        if found_replacement is not None:
            options.append(found_replacement)
        if id(node) in conditions and not isinstance(node, ast.UnaryOp):
            options.append(("condition negated", f"(not ({original}))"))
        for operator, replacement in options:
            mutant = Mutant(path, node.lineno, col, end_col, original, replacement, operator)
            try:
                mutated = ast.parse(mutant.apply(source))
            except SyntaxError:
                continue
            if ast.dump(mutated) != original_dump:
                found.append(mutant)
    return sorted(found, key=lambda mutant: (mutant.line, mutant.col, mutant.operator))


def sample(mutants: list[Mutant], per_module: int, seed: int, path: str) -> list[Mutant]:
    """A uniform sample of `per_module` of one module's mutants, the same for the same seed and module text.

    Seeded per module, so that a change elsewhere in the tree leaves this module's sample as it was.
    """
    chosen = random.Random(f"{seed}/{path}").sample(range(len(mutants)), min(per_module, len(mutants)))
    return [mutants[index] for index in sorted(chosen)]
