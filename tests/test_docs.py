"""The user docs say only what is true of this checkout: README.md, benchmarks/README.md and docs/*.md stay within
their line limits; every ``kso ...`` command they show parses with kso's own argument parser; every
``python -m module`` they show names a module that exists, with flags its source defines; every file path and
relative link they give exists, and every ``#anchor`` is a heading of its target; and neither the docs nor the
product code's comments cite work history (sessions, rounds, issue numbers)."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import shlex
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from kso.cli import build_parser, parse
from tests.support.layout import PRODUCT

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"README.md": 300, "benchmarks/README.md": 600, "docs/architecture.md": 150}
# HISTORY.md is not among them: it is the dated log, kept as it was written (its commands and paths as they were).
DOCS = sorted({"README.md", "benchmarks/README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))})
# Work-history references: "session 9", "this session", "issue 16", "the fifth round", "round 4". An upstream
# project's issue ("kubernetes-client/python issues #547", "google/or-tools#5288") is a citation, not history.
HISTORY_WORDS = re.compile(r"\bsessions? \d+|\bthis session\b|\bissues? #?\d+|"
                           r"\b(?:first|second|third|fourth|fifth|sixth|seventh) round\b|\bround \d+\b", re.I)
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+ $")


def history_references(prose: str) -> list[str]:
    return [m.group(0) for m in HISTORY_WORDS.finditer(prose)
            if not (m.group(0).lower().startswith("issue") and UPSTREAM.search(prose[max(0, m.start() - 60):m.start()]))]


# Outputs a command writes (or a user's own files), named in the docs but not in the checkout.
NOT_IN_CHECKOUT = re.compile(r"^(?:\.\./shared/|kso-demo-report/|my-cluster/|report-[\w-]+/|out/|/|~|\$|<|"
                             r"path/to/)")


def text(doc: str) -> str:
    return (ROOT / doc).read_text()


def code_blocks(markdown: str, inline: bool = True) -> Iterator[str]:
    """The lines of every fenced code block, then (with ``inline``) every inline code span, joined onto one line."""
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.S | re.M):
        yield from block.splitlines()
    if inline:
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
        for span in re.findall(r"`([^`]+)`", prose):
            yield span.replace("\n", " ")


def inline_spans(markdown: str) -> list[str]:
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
    return [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]


def command_lines(markdown: str, program: str, inline: bool = False) -> list[list[str]]:
    """Each command line starting at ``program`` (e.g. "kso") in the fenced code blocks (or, with ``inline``, in
    the inline code spans), split as a shell would, comments and "..." dropped."""
    found = []
    for line in (inline_spans(markdown) if inline else code_blocks(markdown, inline=False)):
        line = line.split(" # ")[0].strip()
        for start in re.finditer(rf"(?:^|[\s;&|(]){re.escape(program)} ", line):
            try:
                words = shlex.split(line[start.start():])
            except ValueError:
                continue
            words = [w for w in words if w != "..."]
            for i, w in enumerate(words):  # stop at the next command of a pipeline or list
                if w in ("&&", "||", "|", ";"):
                    words = words[:i]
                    break
            found.append(words[words.index(program):])
    return found


@pytest.mark.parametrize("doc", sorted(LIMITS))
def test_line_limits(doc: str) -> None:
    lines = len(text(doc).splitlines())
    assert lines <= LIMITS[doc], f"{doc} has {lines} lines, more than {LIMITS[doc]}: move detail to docs/"


def options_of(command: str) -> set[str]:
    """The option strings ``kso <command>`` accepts (empty when there is no such command)."""
    sub = build_parser([command])._subparsers._group_actions[0].choices.get(command)  # type: ignore[union-attr]
    return set(sub._option_string_actions) if sub is not None else set()


@pytest.mark.parametrize("doc", DOCS)
def test_every_kso_command_named_in_prose_exists_with_its_options(doc: str) -> None:
    """An inline `kso bench --prometheus` names a command and options; its values may be left out."""
    bad = []
    for words in command_lines(text(doc), "kso", inline=True):
        if len(words) < 2 or not re.match(r"^[a-z-]+$", words[1]):
            continue
        known = options_of(words[1])
        if not known:
            bad.append(f"kso {words[1]}: no such command")
        bad += [f"kso {words[1]} {w}" for w in words[2:] if w.startswith("--") and w.split("=")[0] not in known]
    assert bad == [], f"{doc}: {bad}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_kso_command_shown_parses(doc: str) -> None:
    commands = command_lines(text(doc), "kso")
    for program in ("python", "python3"):  # python -m kso.cli <command> ... is the same command
        commands += [["kso", *w[3:]] for w in command_lines(text(doc), program) if w[1:3] == ["-m", "kso.cli"]]
    bad = []
    for words in commands:
        if len(words) < 2 or words[1].startswith("<") or not re.match(r"^[a-z-]+$", words[1]):
            continue  # prose such as `kso <command>` or `kso` alone
        try:
            parse(words[1:])
        except SystemExit as exc:
            if exc.code not in (0, None):
                bad.append(" ".join(words))
    assert bad == [], f"{doc}: commands kso's parser refuses: {bad}"


def module_source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    origin = Path(spec.origin)
    files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    return "\n".join(f.read_text() for f in files)


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_module_shown_exists_with_its_flags(doc: str) -> None:
    bad = []
    for program in ("python", "python3"):
        for words in command_lines(text(doc), program):
            if len(words) < 3 or words[1] != "-m" or words[2] == "kso.cli" or not words[2].startswith(
                    (*PRODUCT, "benchmarks")):
                continue  # pytest, pip, ...; kso.cli is checked with kso's parser above
            module = words[2]
            if importlib.util.find_spec(module) is None:
                bad.append(f"{module}: no such module")
                continue
            source = module_source(module)
            for flag in (w.split("=")[0] for w in words[3:] if w.startswith("--")):
                if f'"{flag}"' not in source and f"'{flag}'" not in source:
                    bad.append(f"{module} {flag}: not an option of that module")
    assert bad == [], f"{doc}: {bad}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M),
                              re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_and_anchor_exists(doc: str) -> None:
    here = (ROOT / doc).parent
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text(doc)):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto
        file, _, anchor = target.partition("#")
        path = (here / file).resolve() if file else ROOT / doc
        if not path.exists():
            bad.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            bad.append(f"{target}: no such heading")
    assert bad == [], f"{doc}: {bad}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_path_named_exists(doc: str) -> None:
    bad = []
    for span in code_blocks(text(doc)):
        for word in re.split(r"[\s,;()]+", span):
            word = word.strip("'\".:")
            if re.match(r"^\w+\.py$", word):  # a bare module file name: some file of the project has it
                if not any(ROOT.glob(f"*/**/{word}")):
                    bad.append(word)
                continue
            if (("/" not in word) or "://" in word or NOT_IN_CHECKOUT.match(word) or "*" in word
                    or not re.match(r"^[\w.\-/{}]+$", word)):
                continue
            if not re.search(r"\.(py|md|yaml|yml|json|jsonl|png|txt|csv|gz|sh|toml)$", word) and not word.endswith("/"):
                continue
            for path in expand_braces(word):
                if not ((ROOT / path).exists() or ((ROOT / doc).parent / path).exists()):
                    bad.append(path)
    assert bad == [], f"{doc} names files this checkout does not have: {sorted(set(bad))}"


def expand_braces(word: str) -> list[str]:
    """`a.{txt,json}` -> a.txt, a.json (one brace group)."""
    m = re.search(r"\{([^}]*)\}", word)
    if not m:
        return [word]
    return [word[:m.start()] + part + word[m.end():] for part in m.group(1).split(",")]


@pytest.mark.parametrize("doc", DOCS)
def test_user_docs_cite_no_work_history(doc: str) -> None:
    found = history_references(text(doc))
    assert found == [], f"{doc} cites work history (move it to HISTORY.md or drop it): {found}"


def comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def test_product_code_comments_cite_no_work_history() -> None:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, comment in comments_and_docstrings(path):
                found += [f"{path.relative_to(ROOT)}:{line}: {ref}" for ref in history_references(comment)]
    assert found == [], found


def test_the_quick_start_is_two_commands_that_exist() -> None:
    """README's quick start: `pip install -e '.[bench]' && kso demo`, then `.ci/run`; the extra and the script exist."""
    section = text("README.md").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert block, "README's quick start lost its code block"
    commands = [line.split(" # ")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["pip install -e '.[bench]' && kso demo", ".ci/run"]
    assert re.search(r"^bench = \[", (ROOT / "pyproject.toml").read_text(), re.M), "pyproject.toml has no bench extra"
    script = ROOT / ".ci" / "run"
    assert script.is_file() and script.stat().st_mode & 0o111, ".ci/run is missing or not executable"
    assert options_of("demo"), "kso demo is not a command"
