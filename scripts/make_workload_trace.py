#!/usr/bin/env python3
"""Writes a seeded synthetic request trace in the Mooncake format that `statecheck replay --trace`
reads (one JSON object per line: timestamp in ms, input_length, output_length, hash_ids naming
512-token blocks; docs/cache_policies.md "Workloads").

Patterns (the request shapes of the policy anchors):
  multiturn  SESSIONS conversations of ROUNDS turns; turn r sends the whole history (every block
             of turn r - 1) plus 1-3 new blocks (SGLang #31643's multi-turn benchmark shape)
  fewshot    one shared system prompt of 4 blocks plus a distinct 1-block question, QUESTIONS
             questions sent REPEATS times (few-shot prompting)
  agentic    CONTEXTS long contexts of 16 blocks, each followed by FANOUT short tool calls that
             branch from it (the context plus 1 new block each), contexts interleaved
  cyclic     K prefixes of 2 blocks visited in the same order ROUNDS times, each request adding
             1 fresh block (a scan over K prefixes: LRU's worst case once K exceeds the cache)

Arrivals are a Poisson process of RATE requests/s; output lengths are uniform in 16..64 tokens;
the last block of every prompt is partial (input_length = 512 x blocks - U(0, 255)), as in the
conversation trace. Block hashes are fresh integers per new block, so equal hash prefixes are
exactly the shared prefixes of the pattern.

usage: scripts/make_workload_trace.py PATTERN OUT.jsonl [--seed N] [--requests N] [--k K]
"""
import argparse
import json
import random
import sys


def blocks_to_request(blocks, rng):
    return {"input_length": 512 * len(blocks) - rng.randint(0, 255),
            "output_length": rng.randint(16, 64), "hash_ids": list(blocks)}


def multiturn(rng, fresh, n):
    sessions = max(1, n // 12)
    history = [[] for _ in range(sessions)]
    order = [s for s in range(sessions) for _ in range(12)]
    rng.shuffle(order)  # turns of different sessions interleave; each session's turns stay ordered
    for s in order:
        history[s] += [fresh() for _ in range(rng.randint(1, 3))]
        yield list(history[s])


def fewshot(rng, fresh, n):
    system = [fresh() for _ in range(4)]
    questions = [[fresh()] for _ in range(max(1, n // 3))]
    for _ in range(3):
        for q in questions:
            yield system + q


def agentic(rng, fresh, n):
    fanout = 16
    contexts = [[fresh() for _ in range(16)] for _ in range(max(1, n // (fanout + 1)))]
    pending = [(c, -1) for c in contexts]
    while pending:  # interleave: pick a context, send its next call (the context itself first)
        i = rng.randrange(len(pending))
        c, k = pending[i]
        yield c if k < 0 else c + [fresh()]
        if k + 1 < fanout:
            pending[i] = (c, k + 1)
        else:
            pending.pop(i)


def cyclic(rng, fresh, n, k):
    prefixes = [[fresh(), fresh()] for _ in range(k)]
    for _ in range(max(1, n // k)):
        for p in prefixes:
            yield p + [fresh()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pattern", choices=["multiturn", "fewshot", "agentic", "cyclic"])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=2000, help="about this many requests")
    ap.add_argument("--k", type=int, default=640, help="cyclic: distinct prefixes")
    ap.add_argument("--rate", type=float, default=4.0, help="arrivals per second")
    a = ap.parse_args()
    if a.requests < 1 or a.k < 1 or a.rate <= 0:
        print("make_workload_trace: --requests, --k and --rate must be positive", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    counter = [0]

    def fresh():
        counter[0] += 1
        return counter[0]

    gen = {"multiturn": lambda: multiturn(rng, fresh, a.requests),
           "fewshot": lambda: fewshot(rng, fresh, a.requests),
           "agentic": lambda: agentic(rng, fresh, a.requests),
           "cyclic": lambda: cyclic(rng, fresh, a.requests, a.k)}[a.pattern]
    t = 0.0
    with open(a.out, "w", encoding="utf-8") as f:
        for blocks in gen():
            r = blocks_to_request(blocks, rng)
            r = {"timestamp": int(t), **r}
            f.write(json.dumps(r) + "\n")
            t += rng.expovariate(a.rate) * 1000.0
    return 0


if __name__ == "__main__":
    sys.exit(main())
