#!/usr/bin/env python3
"""The most token hits any online eviction policy can expect on a trace written by
scripts/make_workload_trace.py (multiturn or agentic), at each point of a `replay --budget-sweep`
run of that trace, next to belady and the best online policy of the run
(docs/cache_policies.md, "The online ceiling").

The generators draw which group comes next at random: multiturn shuffles the turns of all sessions
(12 each), so given the requests so far the next one belongs to session s with probability
p_s = remaining_s / remaining; agentic picks a pending context uniformly, p_c = 1 / pending. A
group is a session or a context, named by its first block. Groups share no blocks, so request t
can hit only on its own group's earlier requests, at most v_g tokens: the longest token prefix its
group's next request shares with any earlier request. When request t arrives, an online policy
holds at most S states (every slot of every pool) and K KV tokens, chosen from requests < t only;
what it holds when t is matched is a subset of that plus what requests still in flight produce
(those that arrived less than the run's longest arrival-to-finish time before t). So

  E[hit_t | requests < t] <= sum over in-flight groups of p_g v_g
                             + min(sum of the S largest p_g v_g of the others,
                                   the K tokens filled greedily by p_g: sum p_g min(v_g, left)),

and the ceiling is sum_t of that over sum_t input_length_t: an upper bound on the expected token
hit rate of every online policy, however it scores (it may even know the generator's law). It
counts the hits of earlier requests only: a retracted request may hit its own prompt, so points
where a policy retracted are marked. belady, knowing the order, is not bound by it.

usage: scripts/online_ceiling.py TRACE.jsonl PATTERN SWEEP.h5 [--json OUT]
       scripts/online_ceiling.py --self-test
"""
import argparse
import json
import sys

BLOCK = 512  # tokens per hash block (the Mooncake format; core/workloads/mooncake_trace.h)


def read_trace(path):
    """[(arrival_s, input_length, hash_ids)] in file order; exits 2 naming the line on bad input."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    ids = [int(h) for h in r["hash_ids"]]
                    length = int(r["input_length"])
                    ts = float(r["timestamp"]) / 1000.0
                except (ValueError, KeyError, TypeError) as e:
                    raise SystemExit(f"online_ceiling: {path}:{n}: not a trace request ({e})")
                if not ids or length < 1 or length > BLOCK * len(ids):
                    raise SystemExit(f"online_ceiling: {path}:{n}: input_length {length} does not "
                                     f"fit {len(ids)} blocks")
                out.append((ts, length, ids))
    except OSError as e:
        raise SystemExit(f"online_ceiling: {path}: {e.strerror}")
    if not out:
        raise SystemExit(f"online_ceiling: {path}: no requests")
    return out


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
    print("online_ceiling self-test: ok")
    return 0


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
        import h5py
    except ImportError:
        print("online_ceiling: needs python3-h5py", file=sys.stderr)
        return 2
    try:
        reqs = read_trace(a.trace)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    g = "replay/budget_sweep"
    try:
        with h5py.File(a.sweep, "r") as f:
            fr = list(f[g + "/memory_fraction"][()])
            pol = [p.decode() if isinstance(p, bytes) else str(p) for p in f[g + "/policies"][()]]
            data = {m: {k: f[f"{g}/{m}_{k}"][()] for k in
                        ("token_hit_rate", "state_slots", "kv_tokens", "max_sojourn",
                         "max_retractions")} for m in ("bf16", "int8")}
            # The trace's prompt tokens as replay counted them: a sweep of another trace is refused.
            counted = f.get("replay/prompt_tokens")
            counted = int(counted[()]) if counted is not None else None
    except (OSError, KeyError) as e:
        print(f"online_ceiling: {a.sweep}: not a budget sweep with the ceiling's inputs ({e})",
              file=sys.stderr)
        return 2
    total = sum(length for _, length, _ in reqs)
    if counted is not None and counted != total:
        print(f"online_ceiling: {a.sweep} replayed {counted} prompt tokens, {a.trace} has {total}: "
              "not a sweep of this trace", file=sys.stderr)
        return 2
    if "belady" not in pol:
        print(f"online_ceiling: {a.sweep}: the sweep ran without belady", file=sys.stderr)
        return 2
    offline = {"belady", "future-count"}
    cands = candidates(reqs, a.pattern)
    rows = []
    print(f"online_ceiling: {a.trace} ({a.pattern}, {len(reqs)} requests)")
    print(f"{'mode':<5} {'f':>7} {'S':>6} {'KV':>9} {'belady':>7} {'online':>7} {'policy':>8} "
          f"{'ceiling':>8} {'ceiling vs belady':>18}  note")
    for mode in ("bf16", "int8"):
        d = data[mode]
        for fi, frac in enumerate(fr):
            rates = {p: float(d["token_hit_rate"][pi][fi]) for pi, p in enumerate(pol)}
            online = {p: r for p, r in rates.items() if p not in offline}
            best = max(online, key=online.get) if online else None
            bel = rates["belady"]
            cap = ceiling(reqs, cands, int(d["state_slots"][fi]), int(d["kv_tokens"][fi]),
                          float(d["max_sojourn"][fi]))
            gap = (bel - cap) / bel if bel > 0 else 0.0
            note = "retractions" if int(d["max_retractions"][fi]) > 0 else ""
            rows.append({"mode": mode, "f": frac, "state_slots": int(d["state_slots"][fi]),
                         "kv_tokens": int(d["kv_tokens"][fi]), "belady": bel,
                         "best_online": online.get(best, 0.0), "best_online_policy": best,
                         "ceiling": cap, "ceiling_gap_to_belady": gap,
                         "retractions": int(d["max_retractions"][fi])})
            print(f"{mode:<5} {frac:>7.4f} {rows[-1]['state_slots']:>6} {rows[-1]['kv_tokens']:>9} "
                  f"{bel:>7.4f} {rows[-1]['best_online']:>7.4f} {best or '-':>8} {cap:>8.4f} "
                  f"{100 * gap:>17.1f}%  {note}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"trace": a.trace, "pattern": a.pattern, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
