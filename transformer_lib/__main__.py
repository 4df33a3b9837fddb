"""``python -m transformer_lib train|translate|convert-marian``: the command-line tool.

Written by hand (tools/export.py leaves it alone); the tool itself,
transformer_lib.cli.main,
is exported from book/appendix_cli.ipynb. Under
``torchrun --nproc_per_node N -m transformer_lib train`` every process runs this file.
"""
import sys

from transformer_lib.cli.main import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m transformer_lib"))
