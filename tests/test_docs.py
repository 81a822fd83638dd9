"""The documentation runs: every python block of docs/ and README.md, the site's strict build, the
README's figures. What a block may assume, and how it is marked skipped or slow: tests/docs_fixture.py."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from sybil import Document, Region
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

import docs_fixture
from conftest import ROOT

PAGES = sorted(p.relative_to(ROOT).as_posix() for p in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
MENTIONS_RAY = re.compile(r"^\s*(import ray|from ray[ .]|import air_ray|from air_ray)", re.MULTILINE)


def _directives(name: str):
    """A parser of `<!-- NAME: ACTION ["reason"] -->` comments: regions parsed as (action, reason)."""
    lexer = DirectiveInHTMLCommentLexer(directive=name, arguments=".+?")

    def parse(document: Document):
        for lexed in lexer(document):
            action, _, reason = lexed.lexemes["arguments"].strip().partition(" ")
            yield Region(lexed.start, lexed.end, (name, action, reason.strip()), lambda example: None)

    return parse


@dataclass
class Block:
    line: int
    slow: bool
    skip: str | None  # the reason, when skipped
    example: object


def blocks(page: str) -> list[Block]:
    """The page's python blocks in order, each with its tier and skip reason from the markers before it."""
    document = Document.parse(str(ROOT / page), PythonCodeBlockParser(), _directives("skip"), _directives("slow"))
    document.namespace["__name__"] = "__docs__"  # classes a block defines get a module; Ray pickles them by value
    out: list[Block] = []
    unmarked = {"skip": None, "slow": False}
    marked, once = dict(unmarked), set()  # `once`: the markers that hold for the next block only
    for example in document.examples():
        parsed = example.parsed
        if isinstance(parsed, tuple) and parsed[0] in unmarked:
            name, action, reason = parsed
            where = f"{page}:{example.line}"
            if action not in ("next", "start", "end"):
                raise ValueError(f"{where}: `{name}: {action}` is not a marker: use next, start or end")
            if action == "end":
                marked[name] = unmarked[name]
                continue
            if name == "skip":
                try:
                    reason = ast.literal_eval(reason) if reason else None
                except (ValueError, SyntaxError):
                    reason = None
                if not isinstance(reason, str) or not reason.strip():
                    raise ValueError(f'{where}: a skip needs its reason as a quoted string: <!-- skip: {action} "why" -->')
            marked[name] = reason if name == "skip" else True
            (once.add if action == "next" else once.discard)(name)
            continue
        out.append(Block(example.line, marked["slow"], marked["skip"], example))
        for name in once:
            marked[name] = unmarked[name]
        once.clear()
    return out


def _plan() -> tuple[list, list, list]:
    fast, slow, skipped = [], [], []
    for page in PAGES:
        page_blocks = blocks(page)
        if any(b.skip is None and not b.slow for b in page_blocks):
            fast.append(page)
        if any(b.skip is None and b.slow for b in page_blocks):
            slow.append(page)
        skipped += [pytest.param(b.skip, id=f"{page}:{b.line}") for b in page_blocks if b.skip is not None]
    return fast, slow, skipped


FAST, SLOW, SKIPPED = _plan()


@pytest.fixture(scope="session")
def docs_tree(tmp_path_factory) -> Path:
    """The fixture tree, built once a session; each page reads a copy of it."""
    return docs_fixture.build(tmp_path_factory.mktemp("docs") / "Volumes")


@pytest.fixture
def docs_env(docs_tree, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "Volumes"
    shutil.copytree(docs_tree, root, symlinks=True)
    monkeypatch.setenv("AIR_VOLUMES_ROOT", str(root))
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    if "datasets" in sys.modules:  # it reads its cache folder from the environment once, at import
        monkeypatch.setattr(sys.modules["datasets"].config, "HF_DATASETS_CACHE", tmp_path / "hf")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "AIR_VOLUMES_TRANSPORT"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return root


def run(page: str, *, with_slow: bool) -> None:
    for block in blocks(page):
        if block.skip is not None or (block.slow and not with_slow):
            continue
        try:
            block.example.evaluate()
        except Exception as e:
            raise AssertionError(f"{page}:{block.line}: the block raised {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("page", FAST)
def test_page(page, docs_env):
    run(page, with_slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW)
def test_page_with_slow_blocks(page, docs_env, request):
    if any(MENTIONS_RAY.search(str(b.example.parsed)) for b in blocks(page)):
        request.getfixturevalue("ray_cluster")
    run(page, with_slow=True)


if SKIPPED:  # a test per block marked skipped, so that each one's reason shows in the report
    @pytest.mark.parametrize("reason", SKIPPED)
    def test_block_marked_skipped(reason):
        pytest.skip(reason)


def test_markers_name_next_start_or_end_and_skips_give_a_reason(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page.write_text('<!-- skip: next -->\n```python\nx = 1\n```\n')
    with pytest.raises(ValueError, match="needs its reason"):
        blocks("page.md")
    page.write_text('<!-- slow: later -->\n```python\nx = 1\n```\n')
    with pytest.raises(ValueError, match="not a marker"):
        blocks("page.md")
    page.write_text('```python\na = 1\n```\n<!-- slow: next -->\n```python\nb = 2\n```\n'
                    '<!-- skip: start "no workspace here" -->\n```python\nc = 3\n```\n```python\nd = 4\n```\n'
                    '<!-- skip: end -->\n```python\ne = 5\n```\n')
    assert [(b.slow, b.skip) for b in blocks("page.md")] == [
        (False, None), (True, None), (False, "no workspace here"), (False, "no workspace here"), (False, None)]


def test_readme_figures_are_the_ones_render_writes():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import render
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    readme = (ROOT / "README.md").read_text()
    assert render.with_readme_figures(readme, ROOT / "benchmarks" / "results") == readme, (
        "README.md's figures differ from benchmarks/results/: run `python benchmarks/run_all.py --render`")


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-6000:]
