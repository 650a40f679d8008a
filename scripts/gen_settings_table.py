"""Write the settings guide's table (``docs/guides/settings.md``) from ``engine/constants.py``.

    python scripts/gen_settings_table.py             # rewrite the table in the guide
    python scripts/gen_settings_table.py --check     # exit 1 if the guide is stale
    python scripts/gen_settings_table.py --markdown  # print the table

The table sits between ``<!-- settings:begin -->`` and ``<!-- settings:end -->``;
``tests/unit/engine/test_settings.py`` fails while the two disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.constants import settings_table  # noqa: E402

BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"


def with_table(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"The page needs a line {BEGIN} followed by a line {END}: add "
                         "them where the settings table goes.")
    return readme[:start + len(BEGIN)] + "\n" + table + readme[end:]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--markdown", action="store_true", help="print the table only")
    parser.add_argument("--page", "--readme", dest="page",
                        default=str(REPO / "docs" / "guides" / "settings.md"))
    args = parser.parse_args(argv)
    table = settings_table()
    if args.markdown:
        sys.stdout.write(table)
        return 0
    path = Path(args.page)
    current = path.read_text(encoding="utf-8")
    wanted = with_table(current, table)
    if args.check:
        if wanted != current:
            print(f"{path} is stale: run python scripts/gen_settings_table.py",
                  file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
