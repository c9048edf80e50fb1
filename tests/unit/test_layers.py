"""Imports run downward through the layers ARCHITECTURE.md names (its "Layers" section, read
here, so the document and the code cannot drift): a module imports from its own layer or a
lower one. Every import of a ccadapter module counts, lazy ones inside functions too."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ccadapter"


def layers() -> dict[str, int]:
    """``"slurm/"`` or ``"prep/hook.py"`` -> its layer, from ARCHITECTURE.md (1 = lowest)."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, int] = {}
    for number, body in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", section, flags=re.M | re.S):
        head = body.split(":", 1)[0]  # the paths come before the colon; the prose after
        for entry in re.findall(r"`([\w/]+(?:/|\.py))`", head):
            assert entry not in table, f"{entry} is in two layers"
            table[entry] = int(number)
    assert table, "no layers found in ARCHITECTURE.md"
    return table


def path_of(module: str) -> str:
    """``ccadapter.outbox`` -> ``outbox/__init__.py``; ``ccadapter.prep.hook`` ->
    ``prep/hook.py`` (relative to ccadapter/)."""
    parts = module.split(".")[1:]
    if (PACKAGE.joinpath(*parts).with_suffix(".py")).is_file() and parts:
        return "/".join(parts) + ".py"
    return "/".join([*parts, "__init__.py"])


def layer_of(path: str, table: dict[str, int]) -> int | None:
    """The layer of the most specific entry naming ``path`` (a module, else its package)."""
    matches = [e for e in table if path == e or (e.endswith("/") and path.startswith(e))]
    return table[max(matches, key=len)] if matches else None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a ccadapter module in ``path``."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if path.name == "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.append((node.lineno, base))
            # `from ccadapter import x` / `from ccadapter.pkg import mod`: a module named
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if path_of(sub) != path_of(base) and (
                        PACKAGE.joinpath(*sub.split(".")[1:]).with_suffix(".py").is_file()
                        or PACKAGE.joinpath(*sub.split(".")[1:]).is_dir()):
                    found.append((node.lineno, sub))
    return [(line, m) for line, m in found if m == "ccadapter" or m.startswith("ccadapter.")]


def upward_imports() -> list[str]:
    table = layers()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        own = layer_of(rel, table)
        if own is None:
            problems.append(f"ccadapter/{rel}: in no layer of ARCHITECTURE.md")
            continue
        for line, module in imports(path):
            target = layer_of(path_of(module), table)
            if target is not None and target > own:
                problems.append(f"ccadapter/{rel}:{line} (layer {own}) imports {module} "
                                f"(layer {target})")
    return problems


def test_every_module_imports_only_its_own_layer_and_those_below():
    assert upward_imports() == []


def test_the_layers_name_only_existing_paths():
    missing = [e for e in layers() if not (PACKAGE / e).exists()]
    assert missing == []


# Issue 35: config/keys.py, views.py and secrets.py imported each other in a loop (under
# TYPE_CHECKING), hiding which holds what. Within config/, imports run one way.
CONFIG = Path(__file__).resolve().parents[2] / "ccadapter" / "config"


def config_imports(module: str) -> set[str]:
    """The config modules ``module`` imports, TYPE_CHECKING blocks included."""
    tree = ast.parse((CONFIG / f"{module}.py").read_text())
    return {node.module.rsplit(".", 1)[1] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("ccadapter.config.")}


def test_the_config_modules_import_each_other_one_way():
    order = ["secrets", "views", "keys", "load", "rules"]  # each may import those before it
    for i, module in enumerate(order):
        assert config_imports(module) <= set(order[:i]), (module, config_imports(module))
