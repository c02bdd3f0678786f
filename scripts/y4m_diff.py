#!/usr/bin/env python3
"""Compares two y4m files of the same size sample by sample: prints the
largest difference and how many samples differ; exits 1 past TOLERANCE
(default 1) or when sizes or frame counts differ.
    y4m_diff.py A.y4m B.y4m [TOLERANCE]"""
import sys


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    nl = data.index(b"\n")
    tags = data[:nl].split()
    w = int(next(t for t in tags if t.startswith(b"W"))[1:])
    h = int(next(t for t in tags if t.startswith(b"H"))[1:])
    size, pos, out = w * h * 3 // 2, nl + 1, []
    while pos < len(data):
        pos = data.index(b"\n", pos) + 1
        out.append(data[pos:pos + size])
        pos += size
    return (w, h), out


def main():
    tol = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    (sa, a), (sb, b) = frames(sys.argv[1]), frames(sys.argv[2])
    if sa != sb or len(a) != len(b):
        print(f"sizes {sa} and {sb}, {len(a)} and {len(b)} frames")
        return 1
    worst = differ = total = 0
    for fa, fb in zip(a, b):
        total += len(fa)
        if fa == fb:
            continue
        for x, y in zip(fa, fb):
            if x != y:
                differ += 1
                worst = max(worst, abs(x - y))
    print(f"{len(a)} frames {sa[0]}x{sa[1]}: max diff {worst}, {differ} of {total} samples differ")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
