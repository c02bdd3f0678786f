"""Merges bench_sample's and torch_sample.py's JSON into one table of p50 /
p99 tick latency with ratios to the hand-written floor, and checks the
targets. Usage: report.py KPIPE.json TORCH.json"""
import json
import sys


def main():
    kp = json.load(open(sys.argv[1]))
    th = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {"results": []}
    rows = kp["results"] + th["results"]
    by = {(r["variant"], r["n"]): r for r in rows}
    print(f"ReLU(input0 + input1), float32, on {kp['device']} (torch {th.get('torch', '-')})")
    print(f"{'variant':<14} {'N':>9} {'p50 us':>9} {'p99 us':>9}  {'p50 / hand graph':>16}"
          f" {'p50 / hand stream':>17}")
    targets = []
    for n in sorted({r["n"] for r in rows}):
        hg, hs = by[("hand graph", n)]["p50_us"], by[("hand stream", n)]["p50_us"]
        for name in ("hand graph", "kpipe graph", "hand stream", "kpipe stream", "torch eager",
                     "torch graph"):
            r = by.get((name, n))
            if r:
                print(f"{name:<14} {n:>9} {r['p50_us']:>9.2f} {r['p99_us']:>9.2f}  "
                      f"{r['p50_us'] / hg:>16.3f} {r['p50_us'] / hs:>17.3f}")
        g, s = by[("kpipe graph", n)], by[("kpipe stream", n)]
        targets.append((f"N={n}: kpipe graph p50 <= 1.10 x hand graph", g["p50_us"] / hg, 1.10))
        targets.append((f"N={n}: kpipe stream p50 <= 1.10 x hand stream", s["p50_us"] / hs, 1.10))
        if ("torch graph", n) in by:
            tg, te = by[("torch graph", n)]["p50_us"], by[("torch eager", n)]["p50_us"]
            targets.append((f"N={n}: kpipe graph p50 <= 0.6 x torch graph", g["p50_us"] / tg, 0.6))
            targets.append((f"N={n}: kpipe graph p50 < torch eager", g["p50_us"] / te, 1.0))
        hgf = by[("hand graph", n)]["in_flight_us"]
        targets.append((f"N={n}: in-flight throughput >= 0.9 x hand graph back to back",
                        hgf / g["in_flight_us"], 0.9, True))
    bw = kp["bandwidth"]
    print(f"bandwidth at N=16777216: d2d copy {bw['d2d_copy_gbs']:.0f} GB/s; engine "
          f"{bw['engine']['gbs']:.0f} GB/s ({100 * bw['engine']['fraction_of_copy']:.1f}%); relu "
          f"{bw['relu']['gbs']:.0f} GB/s ({100 * bw['relu']['fraction_of_copy']:.1f}%)")
    for m in ("engine", "relu"):
        targets.append((f"{m} module >= 80% of copy bandwidth", bw[m]["fraction_of_copy"], 0.8, True))
    print("targets:")
    missed = 0
    for t in targets:
        what, value, bound = t[:3]
        at_least = len(t) > 3
        ok = value >= bound if at_least else value <= bound
        missed += not ok
        print(f"  {'met ' if ok else 'MISS'} {what}: {value:.3f}")
    print(f"{len(targets) - missed} of {len(targets)} targets met")


if __name__ == "__main__":
    main()
