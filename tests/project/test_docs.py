"""The docs cannot drift from the code: docs/tables.md is generated from
pipelines/contract/schemas.py, the code cites the project's own docs/design.md, and the README
stays short (issue #19)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from pipelines.contract.schemas import TABLES

ROOT = Path(__file__).resolve().parents[2]


def test_tables_doc_is_generated_from_the_schemas():
    render = runpy.run_path(str(ROOT / "docs" / "gen_tables.py"))["render"]
    assert (ROOT / "docs" / "tables.md").read_text(encoding="utf-8") == render()


@pytest.mark.parametrize("table", list(TABLES))
def test_tables_doc_lists_every_column_of(table):
    text = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {table}\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", section, flags=re.M) == TABLES[table].names


def test_readme_is_under_15_kb():
    assert len((ROOT / "README.md").read_bytes()) < 15_000


def test_code_cites_docs_design_not_an_outside_design_file():
    cited = [f"{p.relative_to(ROOT)}" for d in ("pipelines", "jobs", "tests", "conf", "bench")
             for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".yaml")
             and re.search(r"\b" + "DES" + r"IGN\b", p.read_text(encoding="utf-8"))]
    assert cited == []


@pytest.mark.parametrize("doc", ["architecture", "design", "tables", "guarantees",
                                 "performance", "whatif", "storage"])
def test_docs_linked_from_the_readme_exist(doc):
    assert f"docs/{doc}.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / "docs" / f"{doc}.md").is_file()
