#!/usr/bin/env python3
"""An upper bound on the expected token hit rate of online eviction policies on a trace written
by scripts/make_workload_trace.py (multiturn or agentic), at each point of a `replay
--budget-sweep` run of that trace, next to belady and each online policy of the run
(docs/cache_policies.md, "The online ceiling").

The generators draw which group comes next at random: multiturn shuffles the turns of all sessions
(12 each), so given the requests so far the next one belongs to session s with probability
p_s = remaining_s / remaining; agentic picks a pending context uniformly, p_c = 1 / pending. A
group is a session or a context, named by its first block. Groups share no blocks, so request t
can hit only on its own group's earlier requests, at most v_g tokens: the longest token prefix its
group's next request shares with any earlier request. The engine matches in arrival order; when
request t arrives a policy holds at most S states (every slot of every pool) and K KV tokens,
chosen from requests < t only, and what it holds when t is matched is a subset of that plus what
requests still in flight produce. If no request of the run stays in flight (arrival to finish)
longer than W, those are requests that arrived less than W before t, and

  E[hit_t | requests < t] <= sum over in-flight groups of p_g v_g
                             + min(sum of the S largest p_g v_g of the others,
                                   the K tokens filled greedily by p_g: sum p_g min(v_g, left)).

The ceiling C(W) is sum_t of that over sum_t input_length_t: it bounds the expected token hit
rate (over the generator's draws) of every online policy whose requests all finish within W of
their arrival and which retracts none (a retracted request may later hit on itself or on later
requests). Each online policy of the sweep is compared with C(its own longest sojourn); W*, the
largest W with C(W) <= 0.9 x belady, says how long requests would have to stay in flight for an
online policy to come within 10% of belady in expectation. A single run may pass C by the draw's
fluctuation.

usage: scripts/online_ceiling.py TRACE.jsonl PATTERN SWEEP.h5 [--json OUT]
       scripts/online_ceiling.py --self-test
"""
import argparse
import json
import math
import sys

BLOCK = 512  # tokens per hash block (the Mooncake format; core/workloads/mooncake_trace.h)


class BadInput(Exception):
    """One line naming the file and what is wrong with it."""


def read_trace(path):
    """[(arrival_s, input_length, hash_ids)] in file order, with the checks replay makes."""
    out = []
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte {e.start})")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{path}:{n}: not JSON ({e.msg})")
        if not isinstance(r, dict):
            raise BadInput(f"{path}:{n}: not a JSON object")
        ts, length, ids = r.get("timestamp"), r.get("input_length"), r.get("hash_ids")
        is_int = lambda x: isinstance(x, int) and not isinstance(x, bool)
        if not (is_int(ts) or isinstance(ts, float)) or isinstance(ts, bool) or not math.isfinite(ts):
            raise BadInput(f"{path}:{n}: field 'timestamp' is not a finite number")
        if not is_int(length) or length < 1:
            raise BadInput(f"{path}:{n}: field 'input_length' is not a positive integer")
        if not isinstance(ids, list) or not all(is_int(h) for h in ids):
            raise BadInput(f"{path}:{n}: field 'hash_ids' is not a list of integers")
        if len(ids) != (length + BLOCK - 1) // BLOCK:
            raise BadInput(f"{path}:{n}: input_length {length} needs "
                           f"{(length + BLOCK - 1) // BLOCK} blocks, hash_ids has {len(ids)}")
        out.append((float(ts) / 1000.0, length, ids))
    if not out:
        raise BadInput(f"{path}: no requests")
    return out


def check_pattern(path, reqs, pattern):
    """The structure the pattern's law assumes: multiturn, 12 turns per session, each extending the
    one before; agentic, a 16-block context then 16 calls of the context plus one block."""
    seen = {}
    for n, (_, _, ids) in enumerate(reqs, 1):
        g = ids[0]
        prev = seen.get(g)
        if pattern == "multiturn":
            if prev is not None and ids[:len(prev)] != prev:
                raise BadInput(f"{path}: request {n} does not extend its session's last turn: "
                               "not a multiturn trace")
            seen[g] = ids
        else:
            if prev is None and len(ids) != 16 or prev is not None and (
                    len(ids) != 17 or ids[:16] != prev):
                raise BadInput(f"{path}: request {n} is neither a 16-block context nor a call of "
                               "one: not an agentic trace")
            seen.setdefault(g, ids)
    counts = {}
    for _, _, ids in reqs:
        counts[ids[0]] = counts.get(ids[0], 0) + 1
    want = 12 if pattern == "multiturn" else 17
    bad = [g for g, c in counts.items() if c != want]
    if bad:
        raise BadInput(f"{path}: group of block {bad[0]} has {counts[bad[0]]} requests, the "
                       f"{pattern} generator writes {want}")


def fnv1a64(path):
    h = 14695981039346656037
    with open(path, "rb") as f:
        for byte in f.read():
            h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


class Trie:
    """Block ids of earlier prompts; each node keeps the most tokens any prompt had in its block."""

    def __init__(self):
        self.root = {}

    def insert(self, length, ids):
        node = self.root
        for i, h in enumerate(ids):
            toks = min(BLOCK, length - BLOCK * i)
            entry = node.setdefault(h, [0, {}])
            entry[0] = max(entry[0], toks)
            node = entry[1]

    def shared(self, length, ids):
        """Tokens of this prompt's longest prefix shared with an inserted one."""
        node, total = self.root, 0
        for i, h in enumerate(ids):
            entry = node.get(h)
            if entry is None:
                break
            toks = min(BLOCK, length - BLOCK * i)
            total += min(toks, entry[0])
            if entry[0] < toks:
                break
            node = entry[1]
        return total


def candidates(reqs, pattern):
    """Per request t: [(group, p_g, v_g)] for the groups its arrival could hit (v_g > 0)."""
    groups = [ids[0] for _, _, ids in reqs]
    nxt = {}  # group -> indices of its requests still to come, in order
    for t, g in enumerate(groups):
        nxt.setdefault(g, []).append(t)
    pos = {g: 0 for g in nxt}
    trie = Trie()
    out = []
    for t in range(len(reqs)):
        remaining = len(reqs) - t
        pending = [g for g in nxt if pos[g] < len(nxt[g])]
        step = []
        for g in pending:
            i = nxt[g][pos[g]]
            _, length, ids = reqs[i]
            v = trie.shared(length, ids)
            if v == 0:
                continue
            rem = len(nxt[g]) - pos[g]
            p = rem / remaining if pattern == "multiturn" else 1.0 / len(pending)
            step.append((g, p, v))
        out.append(step)
        _, length, ids = reqs[t]
        trie.insert(length, ids)
        pos[groups[t]] += 1
    return out


def ceiling(reqs, cands, slots, kv_tokens, flight_s):
    """Upper bound on the expected token hit rate of any online policy (module docstring)."""
    hits = 0.0
    last = {}  # group -> arrival of its latest request so far
    for t, (arrival, _, ids) in enumerate(reqs):
        inflight = 0.0
        rest = []
        for g, p, v in cands[t]:
            if g in last and arrival - last[g] < flight_s:
                inflight += p * v
            else:
                rest.append((p, v))
        by_value = sorted((p * v for p, v in rest), reverse=True)
        slot_bound = sum(by_value[:slots])
        left, kv_bound = kv_tokens, 0.0
        for p, v in sorted(rest, reverse=True):
            if left <= 0:
                break
            take = min(v, left)
            kv_bound += p * take
            left -= take
        hits += inflight + min(slot_bound, kv_bound)
        last[ids[0]] = arrival
    return hits / sum(length for _, length, _ in reqs)


def self_test():
    def req(ts, length, ids):
        return (ts, length, ids)

    inf = 10**12
    # Two sessions of two turns, a1 b1 a2 b2 (hand-computed in docs/cache_policies.md terms).
    mt = [req(0, 400, [1]), req(100, 300, [2]), req(200, 900, [1, 3]), req(300, 1000, [2, 4])]
    c = candidates(mt, "multiturn")
    assert c[0] == [] and c[1] == [(1, 1 / 3, 400)], c[:2]
    assert c[2] == [(1, 0.5, 400), (2, 0.5, 300)] and c[3] == [(2, 1.0, 300)], c[2:]
    checks = [
        (ceiling(mt, c, 1, inf, 0.0), (400 / 3 + 200 + 300) / 2600),
        (ceiling(mt, c, 2, inf, 0.0), (400 / 3 + 350 + 300) / 2600),
        (ceiling(mt, c, 2, 350, 0.0), (350 / 3 + 175 + 300) / 2600),
        # Every earlier request in flight: nothing is bounded by the pools.
        (ceiling(mt, c, 0, 0, 1e9), (400 / 3 + 350 + 300) / 2600),
        (ceiling(mt, c, 0, 0, 0.0), 0.0),
    ]
    # Agentic: contexts c ([1, 2]) and d ([3, 4]) of one tool call each, c0 d0 c1 d1.
    ag = [req(0, 1000, [1, 2]), req(1, 900, [3, 4]), req(2, 1200, [1, 2, 5]),
          req(3, 1100, [3, 4, 6])]
    ca = candidates(ag, "agentic")
    assert ca[1] == [(1, 0.5, 1000)] and ca[2] == [(1, 0.5, 1000), (3, 0.5, 900)], ca
    assert ca[3] == [(3, 1.0, 900)], ca
    checks += [
        (ceiling(ag, ca, 1, inf, 0.0), (500 + 500 + 900) / 4200),
        (ceiling(ag, ca, 2, inf, 0.0), (500 + 950 + 900) / 4200),
    ]
    for got, want in checks:
        assert abs(got - want) < 1e-12, (got, want)
    # A prompt shares a partial last block only up to the tokens both have in it.
    t = Trie()
    t.insert(700, [7, 8])
    assert t.shared(1024, [7, 8]) == 700 and t.shared(600, [7, 8]) == 600
    assert t.shared(1024, [7, 9]) == 512 and t.shared(100, [6]) == 0
    # The window: every group in flight lifts the bound to the unbounded sum; W* caps at 60 s.
    assert abs(ceiling(mt, c, 1, inf, 150.0) - (400 / 3 + 350 + 300) / 2600) < 1e-12
    assert break_even(mt, c, 1, inf, 0.25) == 60.0 and break_even(mt, c, 1, inf, 0.2) is None
    # Malformed and mismatched traces are refused with the line or request named.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def refused(text, pattern=None):
            path = os.path.join(d, "t.jsonl")
            with open(path, "wb") as f:
                f.write(text)
            try:
                reqs = read_trace(path)
                if pattern:
                    check_pattern(path, reqs, pattern)
            except BadInput as e:
                return str(e)
            return None
        good = b'{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}\n'
        assert refused(good) is None
        assert ":1: field 'hash_ids'" in refused(b'{"timestamp": 0, "input_length": 600, '
                                                 b'"hash_ids": "12"}')
        assert "needs 2 blocks" in refused(b'{"timestamp": 0, "input_length": 600, "hash_ids": [1]}')
        assert "'input_length'" in refused(b'{"timestamp": 0, "input_length": true, "hash_ids": [1]}')
        assert "'timestamp'" in refused(b'{"timestamp": NaN, "input_length": 6, "hash_ids": [1]}')
        assert "not UTF-8" in refused(b"\xff\n")
        assert "not a multiturn trace" in refused(
            good + b'{"timestamp": 1, "input_length": 600, "hash_ids": [1, 3]}\n', "multiturn")
        assert "writes 12" in refused(good, "multiturn")
        assert "not an agentic trace" in refused(good, "agentic")
    print("online_ceiling self-test: ok")
    return 0


def break_even(reqs, cands, slots, kv_tokens, target):
    """The largest in-flight window W (s, in steps of 0.25 up to 60) with ceiling(W) <= target; None
    if even W = 0 lies above it."""
    if ceiling(reqs, cands, slots, kv_tokens, 0.0) > target:
        return None
    lo, hi = 0, 240  # quarter seconds
    if ceiling(reqs, cands, slots, kv_tokens, hi / 4) <= target:
        return hi / 4
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ceiling(reqs, cands, slots, kv_tokens, mid / 4) <= target:
            lo = mid
        else:
            hi = mid
    return lo / 4


def read_sweep(path, trace_hash):
    import h5py
    g = "replay/budget_sweep"
    try:
        with h5py.File(path, "r") as f:
            got = int(f[g + "/trace_fnv1a64"][()][0]) & 0xFFFFFFFFFFFFFFFF
            if got != trace_hash:
                raise BadInput(f"{path}: a sweep of another trace (its trace hash differs)")
            fr = [float(x) for x in f[g + "/memory_fraction"][()]]
            pol = [p.decode() if isinstance(p, bytes) else str(p) for p in f[g + "/policies"][()]]
            data = {}
            for m in ("bf16", "int8"):
                d = {k: f[f"{g}/{m}_{k}"][()] for k in ("token_hit_rate", "state_slots",
                                                       "kv_tokens", "max_sojourn", "retractions")}
                for k in ("token_hit_rate", "max_sojourn", "retractions"):
                    if d[k].shape != (len(pol), len(fr)):
                        raise BadInput(f"{path}: {g}/{m}_{k} is not [policy, fraction]")
                for k in ("state_slots", "kv_tokens"):
                    if d[k].shape != (len(fr),):
                        raise BadInput(f"{path}: {g}/{m}_{k} is not [fraction]")
                data[m] = {k: v.astype(float) for k, v in d.items()}
    except BadInput:
        raise
    except (OSError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise BadInput(f"{path}: not a budget sweep with the ceiling's inputs "
                       f"({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    if "belady" not in pol:
        raise BadInput(f"{path}: the sweep ran without belady")
    return fr, pol, data


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("pattern", help="multiturn or agentic (the others' order is not random)")
    ap.add_argument("sweep", help="HDF5 of `replay --budget-sweep --trace TRACE` with belady")
    ap.add_argument("--json", help="write the table here")
    a = ap.parse_args()
    if a.pattern not in ("multiturn", "agentic"):
        print(f"online_ceiling: pattern '{a.pattern}': only multiturn and agentic draw their order "
              "at random (fewshot and cyclic visit a fixed order, which an online policy may know)",
              file=sys.stderr)
        return 2
    try:
        import h5py  # noqa: F401
    except ImportError:
        print("online_ceiling: needs python3-h5py", file=sys.stderr)
        return 2
    try:
        reqs = read_trace(a.trace)
        check_pattern(a.trace, reqs, a.pattern)
        fr, pol, data = read_sweep(a.sweep, fnv1a64(a.trace))
    except BadInput as e:
        print(f"online_ceiling: {e}", file=sys.stderr)
        return 2
    offline = {"belady", "future-count"}
    cands = candidates(reqs, a.pattern)
    rows = []
    print(f"online_ceiling: {a.trace} ({a.pattern}, {len(reqs)} requests); per online policy its hit "
          "rate / the ceiling at its own longest sojourn W; W*: the longest W whose ceiling is "
          "at most 0.9 x belady")
    for mode in ("bf16", "int8"):
        d = data[mode]
        for fi, frac in enumerate(fr):
            S, K = int(d["state_slots"][fi]), int(d["kv_tokens"][fi])
            bel = float(d["token_hit_rate"][pol.index("belady")][fi])
            w_star = break_even(reqs, cands, S, K, 0.9 * bel)
            row = {"mode": mode, "f": frac, "state_slots": S, "kv_tokens": K, "belady": bel,
                   "w_star_s": w_star, "policies": {}}
            cells = []
            for pi, name in enumerate(pol):
                if name in offline:
                    continue
                w = float(d["max_sojourn"][pi][fi])
                cap = ceiling(reqs, cands, S, K, w)
                rate = float(d["token_hit_rate"][pi][fi])
                row["policies"][name] = {"token_hit_rate": rate, "max_sojourn_s": w,
                                         "ceiling": cap,
                                         "retractions": int(d["retractions"][pi][fi])}
                cells.append(f"{name} {rate:.3f}/{cap:.3f} (W {w:.1f}"
                             f"{', retracts' if row['policies'][name]['retractions'] else ''})")
            rows.append(row)
            ws = "none" if w_star is None else f"{w_star:.2f} s"
            print(f"{mode} f={frac:.4f} S {S} KV {K}: belady {bel:.3f}, W* {ws}; " +
                  "; ".join(cells))
    if a.json:
        try:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump({"trace": a.trace, "pattern": a.pattern, "rows": rows}, f, indent=1)
        except OSError as e:
            print(f"online_ceiling: {a.json}: {e.strerror}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
