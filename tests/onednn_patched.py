"""PyTorch's private oneDNN operators for linear layers (the two ``transformer_lib.packed`` uses), taken away or
changed, for the tests of the packed decoder's fallback to F.linear.

As a script, ``python tests/onednn_patched.py MODE ARGS...`` is ``python -m transformer_lib ARGS...`` in a
PyTorch whose operators are patched as MODE says (see :data:`MODES`), with ``PACKED_MIN_WORK`` set to 0 so that,
but for the fallback, every product of ``translate --engine packed`` would be oneDNN's. tests/test_cli_packed.py
runs it; tests/test_packed.py patches the operators in its own process with :class:`PatchedOneDNN`."""
from __future__ import annotations

import runpy
import sys

import torch

REORDER, PRODUCT = "_reorder_linear_weight", "_linear_pointwise"


class PatchedOneDNN:
    """``torch.ops.mkldnn`` with the operators named in ``missing`` gone (AttributeError, as for an operator a
    PyTorch lacks), those in ``raising`` refusing their arguments (as after a change of an operator's schema,
    whose call then raises RuntimeError), those in ``wrong`` answering wrongly (the reorder packs the weight's
    rows reversed; the product drops the bias), and those in ``wrapped`` (name -> function) replaced by
    ``function(real operator)``; every other name is the real operator."""

    def __init__(self, real, missing=(), raising=(), wrong=(), wrapped=None):
        self.real, self.missing, self.raising, self.wrong = real, set(missing), set(raising), set(wrong)
        self.wrapped = dict(wrapped or {})

    def __getattr__(self, name: str):
        if name in self.missing:
            raise AttributeError(f"'_OpNamespace' 'mkldnn' object has no attribute '{name}'")
        op = getattr(self.real, name)
        if name in self.wrapped:
            return self.wrapped[name](op)
        if name in self.raising:
            def changed(*args):
                raise RuntimeError(f"mkldnn::{name}() expected at most {len(args) - 1} argument(s) but received "
                                   f"{len(args)} argument(s)")
            return changed
        if name in self.wrong and name == REORDER:
            return lambda weight, rows: op(weight.flip(0), rows)
        if name in self.wrong and name == PRODUCT:
            return lambda x, packed, bias, *rest: op(x, packed, None, *rest)
        return op


#: MODE -> PatchedOneDNN's arguments, and the words the fallback's warning must contain (None: no warning)
MODES = {
    "missing": (dict(missing={REORDER, PRODUCT}), "lacks one"),
    "raising": (dict(raising={PRODUCT}), "they raise RuntimeError"),
    "wrong": (dict(wrong={PRODUCT}), "they disagree with F.linear"),
    "real": (dict(), None),
}


def patch(mode: str) -> None:
    """Replace ``torch.ops.mkldnn`` for the rest of this process (a test uses monkeypatch instead)."""
    torch.ops.mkldnn = PatchedOneDNN(torch.ops.mkldnn, **MODES[mode][0])


if __name__ == "__main__":
    patch(sys.argv.pop(1))
    import transformer_lib.packed

    transformer_lib.packed.PACKED_MIN_WORK = 0
    transformer_lib.packed.PACKED_MIN_ROWS = 0
    runpy.run_module("transformer_lib", run_name="__main__", alter_sys=True)
