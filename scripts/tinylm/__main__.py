"""python3 -m tinylm (run from scripts/): the same as python3 scripts/train_tinylm.py."""
from .train import main

main()
