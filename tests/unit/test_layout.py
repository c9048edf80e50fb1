"""Issue 31's layout rules for ccadapter/: a file name says one thing (no two modules share
one; ``__init__.py`` excepted), no module runs past 400 lines and no class past 250."""

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ccadapter"
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for p in MODULES if p.name != "__init__.py")
    assert sorted(n for n, count in names.items() if count > 1) == []


def test_no_module_over_400_lines_and_no_class_over_250():
    long = []
    for path in MODULES:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE.parent)
        if len(text.splitlines()) > 400:
            long.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 250:
                long.append(f"{where}: class {node.name}, "
                            f"{node.end_lineno - node.lineno + 1} lines")
    assert long == []
