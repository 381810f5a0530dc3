"""Write docs/tables.md from pipelines/contract/schemas.py: each output table's grain (the docstring
after its schema) and columns (name, Arrow type, nullable). ``tests/project/test_docs.py`` checks
the file is current, so it cannot drift from the schemas.

    python docs/gen_tables.py          # rewrite docs/tables.md
    python docs/gen_tables.py --check  # exit 1 when docs/tables.md is out of date
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "pipelines" / "contract" / "schemas.py"
TARGET = ROOT / "docs" / "tables.md"

HEADER = """# Output tables

Generated from `pipelines/contract/schemas.py` by `python docs/gen_tables.py` (do not edit by hand;
`tests/project/test_docs.py` fails when this file is out of date).

Every table is a Delta table in its own folder under `--output DIR`. Conventions: `run_id` is
the first column of every table; times are `timestamp[us, tz=UTC]`; rates are msg/s or
bytes/s (float64); sizes are bytes; `*_epoch` columns are layout epochs (integers, not times).
A column that is not nullable never holds a null (writes with one are rejected). Query them
with Spark SQL and Delta, or any Delta reader
(`deltalake.DeltaTable("out/sample/entries").to_pandas()`).
"""


def _docstrings() -> dict[str, str]:
    """Module-level ``NAME = ...`` → the string literal right after it (its docstring)."""
    body = ast.parse(SCHEMAS.read_text(encoding="utf-8")).body
    out = {}
    for stmt, nxt in itertools.pairwise(body):
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            out[stmt.targets[0].id] = nxt.value.value
    return out


def _markdown(text: str) -> str:
    """reST literals (````x````) and roles (``:mod:`x```) as Markdown code, one paragraph."""
    text = re.sub(r":[a-z]+:`([^`]+)`", r"`\1`", text)
    return " ".join(text.replace("``", "`").split())


def render() -> str:
    """The whole of docs/tables.md."""
    sys.path.insert(0, str(ROOT))
    from pipelines.contract import schemas  # noqa: PLC0415 - importable once ROOT is on sys.path

    docs = _docstrings()
    names = {id(getattr(schemas, n)): n for n in docs if hasattr(schemas, n)}
    parts = [HEADER]
    parts.append("| table | grain |\n|---|---|")
    grains = {}
    for table, schema in schemas.TABLES.items():
        doc = _markdown(docs[names[id(schema)]])
        grain = doc.split(" — ", 1)[1] if " — " in doc else doc
        grains[table] = grain
        short = re.split(r"\. |: ", grain, maxsplit=1)[0].rstrip(".")
        parts.append(f"| [`{table}`](#{table}) | {short} |")
    for table, schema in schemas.TABLES.items():
        parts.append(f"\n## {table}\n\n{grains[table][:1].upper()}{grains[table][1:]}\n")
        parts.append("| column | type | nullable |\n|---|---|---|")
        for f in schema:
            parts.append(f"| `{f.name}` | `{f.type}` | {'yes' if f.nullable else 'no'} |")
    parts.append(f"\n## Idle windows\n\n{schemas.IDLE_WINDOWS_DOC.rstrip()}")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is out of date: run python docs/gen_tables.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
