#!/usr/bin/env python3
"""Capture transformers' DeepseekV4ForCausalLM stage by stage, under tdiff's stage names.

The command line of the oracle capture (float64, CPU, eager attention and experts, floats
stored as float64), now a wrapper of the tdiff_capture package beside it (python/README.md):

    python3 python/capture_hf.py --model DIR --case case.h5 -o hf.h5 [--stages PATTERN] [--rope-f64]
    python3 python/capture_hf.py --print-mapping      # the module -> stage table (no torch needed)
    tdiff compare case.h5 hf.h5 --group-a /reference --group-b /

Exit codes (as tdiff's): 0 success; 1 a self-check failed (shapes that are not tdiff's, or
--hidden-states-check disagreeing), the dump is written all the same; 2 bad usage or bad
input (no output file is left behind); 3 an internal error.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tdiff_capture.cli import legacy_main  # noqa: E402
from tdiff_capture.mapping import (CONVENTIONS, EXTRA_TENSORS, LAYER_TYPES, MAP, MAPPING,  # noqa: E402,F401
                                   expected_shapes, pattern_matches, stage_class, stage_graph)

if __name__ == "__main__":
    sys.exit(legacy_main())
