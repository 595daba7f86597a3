#!/usr/bin/env python3
"""Trains statecheck's tiny byte-level gated-delta language model and exports it for the C++ side.

The code is the package scripts/tinylm (its docstrings give the model, corpus and outputs); this
file keeps the command the data and documents name: python3 scripts/train_tinylm.py --out DIR ...
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tinylm.train import main  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    main()
