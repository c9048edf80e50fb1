"""The documents cannot drift from the code: the README's configuration reference lists every
key of the config model with its default and no other, and ARCHITECTURE.md's module map names
every module and only existing ones."""

import json
import re
from pathlib import Path

from ccadapter.config.keys import Config

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
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
    ci = json.loads((ROOT / "tests/bench/results/ci.json").read_text())
    assert f"{round(ci['data']['total_s'] / 60)} minutes here" in block


def test_no_command_in_the_readme_needs_sudo():
    text = README.read_text(encoding="utf-8")
    code = re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`[^`\n]+`", text)
    code += [ln for ln in text.splitlines() if ln.startswith("    ")]  # indented blocks
    assert [c for c in code if re.search(r"\bsudo\s+\S", c)] == []  # sudo COMMAND


def test_how_it_is_built_names_every_module_and_only_existing_ones():
    """The map in ARCHITECTURE.md's "How it is built" matches the tree: every module of
    ccadapter/ is named (as ``name.py`` in its package's part), and every ``.py`` file named
    exists."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## How it is built\n", 1)[1].split("\n## ", 1)[0]
    package = ROOT / "ccadapter"
    modules = {p.relative_to(package) for p in package.rglob("*.py")
               if p.name != "__init__.py"}
    named = set(re.findall(r"`(?:ccadapter/)?([\w/]*?)([\w]+\.py)`", section))
    missing = sorted(str(m) for m in modules if m.name not in {f for _, f in named})
    assert missing == []
    unknown = sorted(f for _, f in named if not any(m.name == f for m in modules))
    assert unknown == []


def test_the_readme_stays_an_administrators_guide_of_500_lines_at_most():
    """Issue 31: what the administrator needs, no more; the rest lives in ARCHITECTURE.md,
    TESTING.md and BENCHMARKS.md."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 500


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lowercase, punctuation dropped,
    spaces as hyphens)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_links_between_the_documents_resolve():
    """Every relative link of the top-level documents names a file that exists and, with a
    ``#fragment``, a heading of it."""
    broken = []
    for doc in (README, ARCHITECTURE, ROOT / "TESTING.md", ROOT / "tests/fixtures/README.md"):
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+://", target):
                continue
            name, _, fragment = target.partition("#")
            path = (doc.parent / name).resolve() if name else doc
            if not path.exists() or (fragment and fragment not in _anchors(path)):
                broken.append(f"{doc.name}: {target}")
    assert broken == []
