#!/usr/bin/env python3
"""The layer check (docs/architecture.md: the layers, lowest first).

Fails, naming the file and the line, when:
  - a file includes a public header of a higher layer (the order below);
  - a file includes another layer's private header (src/LAYER/*.h other
    than core's core-impl.h, json-impl.h and half-impl.h, which every layer
    shares, and the few a flow layer offers the flow layers above it, UPWARD);
  - a lower layer names a built-in module;
  - a test or benchmark (tests/, bench/) includes a private header of the
    library (anything under src/) without being listed in WHITE_BOX;
  - files form a circle: by their #include lines, or by calling each
    other's functions (file A defines a function B calls, and B one that
    A calls, directly or around a longer loop).

    layering.py SOURCE_DIR
"""
import os
import re
import sys

# Lowest first. module.h (the module interface and its ports) sits below
# the graph cache, which takes ports; kpipe.h includes everything and is
# for programs and the command line only.
# src/flow/ is four layers, a folder each (layer_of: "flow/runtime" for
# src/flow/runtime/...): the runtime, the built-in stages over it, the
# remote queues, and the JSON form over them all.
ORDER = ["core", "backend", "memory", "module", "graph", "pipeline", "onnx", "modules", "video",
         "flow/runtime", "flow/stages", "flow/remote", "flow/json", "tasks", "tools"]
PUBLIC = {"core.h": "core", "tensor.h": "core", "npy.h": "core", "device.h": "backend",
          "memory.h": "memory", "module.h": "module", "graph_cache.h": "graph",
          "pipeline.h": "pipeline", "onnx.h": "onnx", "modules.h": "modules", "video.h": "video", "flow.h": "flow/runtime", "tasks.h": "tasks", "kpipe.h": "tools"}
# Private headers every layer may include: core's.
SHARED = [os.path.join("src", "core", "core-impl.h"), os.path.join("src", "core", "json-impl.h"),
          os.path.join("src", "core", "half-impl.h")]
# The private headers a flow layer offers the flow layers above it, and
# which of those may include each: the runtime's interface for the stages,
# the remote ends and the JSON form (the runtime's own structures stay in
# runtime-impl.h); the built-in stages' and the remote ends' makers, for
# the JSON form, which chooses them by kind. Only these; each listed layer
# must be above the header's own.
UPWARD = {
    os.path.join("src", "flow", "runtime", "flow-impl.h"): ("flow/stages", "flow/remote",
                                                           "flow/json"),
    os.path.join("src", "flow", "stages", "stages-impl.h"): ("flow/json",),
    os.path.join("src", "flow", "remote", "remote_end-impl.h"): ("flow/json",),
}
# Tests and benchmarks use the public headers, like any program; these few
# look inside on purpose, each for the reason given. A file listed here that
# no longer includes a private header fails the check too, so the list stays
# true.
WHITE_BOX = {
    "tests/test_onnx_conformance.c": "runs ONNX's node tests through the engine's own graph calls",
    "tests/test_onnx_reader.c": "checks the ONNX reader's messages and wire cursor directly",
    "tests/test_onnx_half.c": "checks the fp16 convolutions' staging and epilogue kernels "
                              "(onnx/ops/nn/nn-impl.h) element by element",
    "tests/fuzz/fuzz_onnx.c": "feeds the ONNX reader below the module, as a parser fuzzer must",
    "tests/test_frame_formats.c": "rebuilds the testsrc picture (flow/stages/pattern-impl.h) byte "
                                  "by byte",
    "tests/test_video.c": "rebuilds the testsrc picture (flow/stages/pattern-impl.h) byte by byte",
    "tests/test_fusion.c": "the f16 conversions (core/half-impl.h), to round as the modules do",
    "tests/test_remote.c": "speaks the remote queue's wire wrongly on purpose "
                           "(flow/remote/remote-impl.h)",
    "tests/test_flow.c": "a source saying it has a backlog, as the remote source does "
                         "(flow/runtime/flow-impl.h)",
    "bench/bench_sample.c": "times specs through the command line's runner (tools/tool-impl.h)",
    "bench/bench_alloc.c": "times specs through the command line's runner (tools/tool-impl.h)",
    "bench/bench_cache.c": "times specs through the command line's runner (tools/tool-impl.h)",
    "bench/bench_fusion.c": "times specs through the command line's runner (tools/tool-impl.h)",
    "bench/bench_flow.c": "times specs through the command line's runner (tools/tool-impl.h)",
}
# Where a quoted include of tests/ and bench/ is looked for after the
# including file's folder: CMake's include directories for them (src/ for
# the white-box tests, src/tools/ through kp_tool).
OUTSIDE_INCLUDE_DIRS = ["src", os.path.join("src", "tools")]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DEFINES = re.compile(r"^(static\s+)?(?:[A-Za-z_][\w \*]*?\s\**)(kp_{1,2}\w+)\s*\([^;{]*\)\s*\{",
                     re.M)
CALLS = re.compile(r"\b(kp_{1,2}\w+)\s*\(")


def files_under(root, exts):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.join(d, n) for n in names if n.endswith(exts)]
    return sorted(out)


def layer_of(path, src, inc):
    if path.startswith(inc + os.sep):
        return PUBLIC.get(os.path.basename(path))
    parts = os.path.relpath(path, src).split(os.sep)
    if parts[0] == "flow" and len(parts) > 2:
        return "flow/" + parts[1]  # a flow layer's folder
    return parts[0]


def resolve(f, name, src, inc):
    if name.startswith("kpipe/"):
        return os.path.join(inc, name[len("kpipe/"):])
    return os.path.normpath(os.path.join(os.path.dirname(f), name))


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def outside_files(top, src):
    """tests/ and bench/: no private header of the library unless white-box."""
    bad, private_users = [], set()
    inc = os.path.join(top, "include", "kpipe")
    rel = lambda p: os.path.relpath(p, top)
    outside = (files_under(os.path.join(top, "tests"), (".c", ".h", ".cu", ".cpp")) +
               files_under(os.path.join(top, "bench"), (".c", ".h", ".cu", ".cpp")))
    for f in outside:
        text = open(f, encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            dirs = [os.path.dirname(f)] + [os.path.join(top, d) for d in OUTSIDE_INCLUDE_DIRS]
            found = [os.path.abspath(os.path.join(d, name)) for d in dirs
                     if os.path.exists(os.path.join(d, name))]
            if not found or not found[0].startswith(os.path.abspath(src) + os.sep):
                continue  # its own folder's, a public or a system header
            private_users.add(rel(f))
            if rel(f) not in WHITE_BOX:
                line = text.count("\n", 0, m.start()) + 1
                bad.append("%s:%d: includes %s, a private header of layer %s; tests and "
                           "benchmarks use include/kpipe/ (or are listed in WHITE_BOX, with why)"
                           % (rel(f), line, name, layer_of(found[0], os.path.abspath(src),
                                                             os.path.abspath(inc))))
    for f in sorted(set(WHITE_BOX) - private_users):
        if os.path.exists(os.path.join(top, f)):
            bad.append("%s: listed in WHITE_BOX but includes no private header" % f)
    return bad


def main(top):
    src, inc = os.path.join(top, "src"), os.path.join(top, "include", "kpipe")
    files = files_under(src, (".c", ".h", ".cu")) + files_under(inc, (".h",))
    rel = lambda p: os.path.relpath(p, top)
    bad = []
    includes = {}
    for f in files:
        text = open(f, encoding="utf-8").read()
        me = layer_of(f, src, inc)
        includes[f] = set()
        for m in INCLUDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            target = resolve(f, m.group(1), src, inc)
            if not os.path.exists(target):
                continue  # a generated or system header
            includes[f].add(target)
            them = layer_of(target, src, inc)
            where = "%s:%d" % (rel(f), line)
            if target.startswith(inc + os.sep):
                if me in ORDER and them in ORDER and ORDER.index(them) > ORDER.index(me):
                    bad.append("%s: layer %s includes %s of the higher layer %s"
                               % (where, me, m.group(1), them))
            elif them != me and rel(target) not in SHARED and me not in UPWARD.get(rel(target), ()):
                bad.append("%s: includes %s, a private header of layer %s"
                           % (where, m.group(1), them))
    for comp in circles(includes):
        bad.append("an include circle: " + " -> ".join(rel(c) for c in comp))

    sources = files_under(src, (".c", ".cu"))
    defined, calls = {}, {}
    for f in sources:
        text = COMMENT.sub("", open(f, encoding="utf-8").read())
        own = set()
        for static, name in DEFINES.findall(text):
            own.add(name)  # a call of a name the file defines is its own
            if not static:
                defined.setdefault(name, set()).add(f)
        calls[f] = set(CALLS.findall(text)) - own
    uses = {f: {g for name in calls[f] for g in defined.get(name, ()) if g != f}
            for f in sources}
    for comp in circles(uses):
        pairs = ["%s calls %s" % (rel(a), ", ".join(sorted(
            n for n in calls[a] if b in defined.get(n, ())))) + " of " + rel(b)
                 for a in comp for b in comp if b in uses[a]]
        bad.append("a circle of files calling each other: " + "; ".join(pairs))

    lower = ["pipeline", "backend", "memory", "core", "graph"]
    module_names = re.compile(r"kp__(engine|relu)_|kp__module_(engine|relu)")
    for f in sources:
        if layer_of(f, src, inc) in lower and module_names.search(open(f).read()):
            bad.append("%s: a lower layer names a built-in module" % rel(f))

    for header, above in sorted(UPWARD.items()):
        own = layer_of(os.path.join(top, header), src, inc)
        if not os.path.exists(os.path.join(top, header)):
            bad.append("%s: listed in UPWARD but not there" % header)
        for layer in above:
            if layer not in ORDER or ORDER.index(layer) <= ORDER.index(own):
                bad.append("%s: UPWARD lets %s include it, which is not a layer above %s"
                           % (header, layer, own))

    bad += outside_files(top, src)

    for b in bad:
        print("FAIL: " + b)
    if not bad:
        print("PASS: layers in order (%s), no private header across layers but the %d a flow "
              "layer offers those above it, no circle; tests and benchmarks inside only where "
              "white-box (%d files)" % (" < ".join(ORDER), len(UPWARD), len(WHITE_BOX)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
