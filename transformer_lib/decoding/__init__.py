"""The package ``transformer_lib.decoding``: it re-exports its modules' public names.

Generated from book/11_decoding.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: abce9685c65277ae
# fmt: off

from transformer_lib.decoding.greedy import (
    DecodingConfig,
    Seq2SeqModel,
    DecodingStepper,
    check_model,
    check_src,
    check_max_len,
    default_max_len,
    check_decoding,
    decoding_mode,
    Stepper,
    make_stepper,
    start_decoding,
    greedy_decode,
    decode_with,
    token_scores,
)
from transformer_lib.decoding.beam import (
    length_penalty_factor,
    beam_search,
)
from transformer_lib.decoding.sampling import (
    sampling_distribution,
    sample,
)

__all__ = [
    'DecodingConfig',
    'Seq2SeqModel',
    'DecodingStepper',
    'check_model',
    'check_src',
    'check_max_len',
    'default_max_len',
    'check_decoding',
    'decoding_mode',
    'Stepper',
    'make_stepper',
    'start_decoding',
    'greedy_decode',
    'decode_with',
    'token_scores',
    'length_penalty_factor',
    'beam_search',
    'sampling_distribution',
    'sample',
]
