"""The README's configuration reference cannot drift from the config model: every key has a
row, with the model's default, and no row names a key the model does not have."""

import json
import re
from pathlib import Path

from ccadapter.config import Config

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(\w+)` \| `(.*?)` \| (.+) \|$")


def reference_rows() -> dict[str, tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Configuration reference", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            assert m.group(1) not in rows, f"{m.group(1)} listed twice"
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_every_config_key_is_documented_with_its_default():
    rows = reference_rows()
    model = {f.alias: f.get_default(call_default_factory=True)
             for f in Config.model_fields.values()}
    assert sorted(rows) == sorted(model)
    for key, default in model.items():
        shown, meaning = rows[key]
        assert json.loads(shown) == default, f"{key}: README says {shown}, model {default!r}"
        assert meaning.strip(), key


def test_the_first_two_commands_stay_on_top():
    """Run as root, as written: a fresh Debian machine run as root may have no sudo."""
    head = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    block = head.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    assert commands == ["tests/testbed/demo", "tests/run"]
    assert "`su -`" in block  # how to become root
    # the time tests/run took as measured (tests/bench/results/ci.json, in BENCHMARKS.md)
    ci = json.loads((README.parent / "tests/bench/results/ci.json").read_text())
    assert f"{round(ci['data']['total_s'] / 60)} minutes here" in block


def test_no_command_in_the_readme_needs_sudo():
    text = README.read_text(encoding="utf-8")
    code = re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`[^`\n]+`", text)
    code += [ln for ln in text.splitlines() if ln.startswith("    ")]  # indented blocks
    assert [c for c in code if re.search(r"\bsudo\s+\S", c)] == []  # sudo COMMAND


def test_how_it_is_built_names_every_module_and_only_existing_ones():
    """The map in "How it is built" matches the tree: every module of ccadapter/ is named
    (as ``name.py`` in its package's part), and every ``.py`` file named exists."""
    text = README.read_text()
    section = text[text.index("## How it is built"):text.index("## Admin guide")]
    package = Path(__file__).resolve().parents[2] / "ccadapter"
    modules = {p.relative_to(package) for p in package.rglob("*.py")
               if p.name != "__init__.py" and p.name != "__main__.py"}
    named = set(re.findall(r"`(?:ccadapter/)?([\w/]*?)([\w]+\.py)`", section))
    missing = sorted(str(m) for m in modules if m.name not in {f for _, f in named})
    assert missing == []
    unknown = sorted(f for _, f in named if not any(m.name == f for m in modules))
    assert unknown == []
