"""``python -m transformer_lib train|translate``: the command-line tool of chapter 12 (see transformer_lib.cli).

Written by hand (tools/export.py leaves it alone); the tool itself is exported from book/12_translation.ipynb.
"""
import sys

from transformer_lib.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m transformer_lib"))
