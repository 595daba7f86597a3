"""statecheck's tiny byte-level gated-delta language model, trained here and exported for the C++
side (core/tinylm):

    python3 scripts/train_tinylm.py --out DIR --minutes M            # CUDA GPU (bf16 autocast)
    python3 scripts/train_tinylm.py --out DIR --device cpu --minutes 2 --tiny
    (or python3 -m tinylm ... from scripts/)

Modules: model (the network), reference (the gated delta rule, token by token and chunked), data
(corpus and splits), export (safetensors, config.json, golden outputs), train (command line,
self-check, training loop, main).

Outputs in --out (names fixed; the C++ loader reads everything from config.json):
    model.safetensors   fp32 weights            config.json        shapes, hyperparameters, corpus
    train_curve.csv     step, loss, bits/byte   eval.txt           held-out evaluation text
    golden.safetensors  fp32 logits and states on the first bytes of eval.txt
    train_log.txt       the log of the run
Works with torch 1.13 (Debian) and 2.x; needs numpy; nothing is downloaded. This file, data and
export import without torch.
"""
# Written into config.json: the C++ forward pass uses the same values.
L2NORM_EPS = 1e-6  # inside the square root, as core/recurrence/gated_delta.h
NORM_EPS = 1e-6  # RMSNorm and gated RMSNorm
VOCAB = 256
