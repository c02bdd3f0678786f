"""Joins bench_cache's JSON and torch_cache.py's into the tables and targets of
bench/RESULTS.md (graph cache section).
    python3 bench/report_cache.py bench_cache.json [torch_cache.json]"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    kp = load(sys.argv[1])
    th = load(sys.argv[2]) if len(sys.argv) > 2 else None
    if not kp:
        print("no bench_cache results")
        return 1
    targets = []
    print(f"graph cache on {kp['device']}" + (f" (torch {th['torch']})" if th else ""))
    print("\nthe cache alone (one-thread kernels; latency = launch + wait)")
    print(f"{'graph':>12} {'hit p50':>9} {'hand p50':>9} {'ratio':>7} {'hit enq':>8} "
          f"{'hand enq':>8} {'cap+inst':>9} {'cap+upd':>8} {'miss upd':>9} {'miss inst':>9}")
    for c in kp["cache"]:
        print(f"{c['kernels']:>4} kernels {c['hit_p50_us']:9.2f} {c['hand_launch_p50_us']:9.2f} "
              f"{c['hit_vs_hand']:7.3f} {c['hit_enqueue_us']:8.2f} {c['hand_enqueue_us']:8.2f} "
              f"{c['hand_capture_instantiate_us']:9.1f} {c['hand_capture_update_us']:8.1f} "
              f"{c['cache_miss_update_us']:9.1f} {c['cache_miss_instantiate_us']:9.1f}")
        targets.append((f"hit path <= 1.05x hand launch ({c['kernels']} kernels)",
                        c["hit_vs_hand"], c["hit_vs_hand"] <= 1.05))
        r = c["hand_capture_instantiate_us"] / c["cache_miss_update_us"]
        targets.append((f"same-topology miss (capture + update) >= 3x cheaper than capture + "
                        f"instantiate ({c['kernels']} kernels)", r, r >= 3))
        if "cache_miss_retarget_us" in c:
            r = c["hand_capture_instantiate_us"] / c["cache_miss_retarget_us"]
            print(f"{'':>12} miss by retarget {c['cache_miss_retarget_us']:.1f} us; by hand, "
                  f"set params {c['hand_set_params_us']:.1f} us, capture + update "
                  f"{c['hand_capture_update_us']:.1f} us")
            targets.append((f"same-topology miss (build + retarget) >= 3x cheaper than capture + "
                            f"instantiate ({c['kernels']} kernels)", r, r >= 3))
            r = c["cache_miss_retarget_us"] / max(c["hand_set_params_us"], 1e-3)
            targets.append((f"(bound) retarget miss vs setting the params by hand "
                            f"({c['kernels']} kernels)", r, r <= 1.5))
    if th:
        one = kp["cache"][0]
        r = th["hit_host_us"] / one["hit_enqueue_us"]
        print(f"\nper-hit host cost: kpipe cache {one['hit_enqueue_us']:.2f} us; "
              f"torch.compile reduce-overhead (8 ops) {th['hit_host_us']:.2f} us: {r:.1f}x")
        targets.append(("per-hit host cost >= 10x lower than reduce-overhead's", r, r >= 10))
    print("\ntraces (p50 / p99 us per tick with a wait; misses; cost per miss us; graphs held;\n"
          "kpipe: the cache's bytes in KiB; torch: torch.cuda.memory_reserved() in MiB)")
    rows = {(t["pipeline"], t["trace"]): t for t in kp["traces"]}
    trows = {}
    for t in (th or {}).get("traces", []):
        trows[(t["pipeline"], t["variant"], t["trace"])] = t
    print(f"{'pipeline':8} {'trace':5} {'kpipe p50/p99':>16} {'miss':>5} {'per miss':>9} "
          f"{'graphs':>6} {'KiB':>6} | {'reduce-overhead p50/p99':>24} {'miss':>5} "
          f"{'per miss':>9} {'MiB rsv':>7} | {'padded graphs p50/p99':>22} {'graphs':>6} "
          f"{'MiB rsv':>7}")
    for (pipe, kind), t in rows.items():
        ro = trows.get((pipe, "reduce-overhead", kind))
        pg = trows.get((pipe, "padded graphs", kind))
        line = (f"{pipe:8} {kind:5} {t['p50_us']:7.2f} /{t['p99_us']:7.2f} {t['misses']:5d} "
                f"{t['per_miss_us']:9.1f} {t['graphs']:6d} {t['bytes'] / 1024:6.0f} |")
        line += (f" {ro['p50_us']:11.2f} /{ro['p99_us']:10.2f} {ro['misses']:5d} "
                 f"{ro['per_miss_us']:9.1f} {ro['bytes_reserved'] / 2**20:7.0f} |"
                 if ro else f" {'-':>24} {'':5} {'':9} {'':7} |")
        line += (f" {pg['p50_us']:10.2f} /{pg['p99_us']:9.2f} {pg['graphs']:6d} "
                 f"{pg['bytes_reserved'] / 2**20:7.0f}" if pg else " -")
        print(line)
    print("\nrotating input sets (p50 / p99 us per tick with a wait)")
    trot = {(r["n"], r["sets"]): r for r in (th or {}).get("rotating", [])}
    groups = {}
    for r in kp["rotating"]:
        groups.setdefault((r["n"], r["sets"]), {})[r["variant"]] = r
    for (n, sets), g in groups.items():
        floor = g["floor (fused graph)"]["p50_us"]
        stream = g["kpipe stream"]["p50_us"]
        print(f"N = {n}, {sets} sets")
        for name, r in g.items():
            print(f"  {name:22} {r['p50_us']:9.2f} /{r['p99_us']:9.2f}   vs floor "
                  f"{r['p50_us'] / floor:6.3f}x   vs stream {r['p50_us'] / stream:6.3f}x")
        if (n, sets) in trot:
            r = trot[(n, sets)]
            print(f"  {'torch.compile':22} {r['p50_us']:9.2f} /{r['p99_us']:9.2f}   vs floor "
                  f"{r['p50_us'] / floor:6.3f}x   vs stream {r['p50_us'] / stream:6.3f}x")
        rb = g["kpipe rebind"]["p50_us"]
        two = g.get("hand 2-kernel graph")
        if two:
            targets.append((f"(bound) kpipe rebind vs the same 2-kernel graph by hand, N={n}, "
                            f"{sets} sets", rb / two["p50_us"], rb / two["p50_us"] <= 1.10))
        if n > 10 ** 6:
            targets.append((f"zero-copy graph mode at 16M within 1.1x of stream ({sets} sets)",
                            rb / stream, rb / stream <= 1.1))
        else:
            targets.append((f"graph-mode tick at 16K <= 1.25x the floor ({sets} sets)",
                            rb / floor, rb / floor <= 1.25))
    met = sum(1 for t in targets if t[2])
    print(f"\ntargets: {met} of {len(targets)} met")
    for name, v, ok in targets:
        print(f"  {name}: {v:.3f} {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
