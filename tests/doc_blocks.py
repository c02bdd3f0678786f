#!/usr/bin/env python3
"""Runs every command block of the docs marked as runnable on cpu (a fenced
block whose info string is "sh cpu"), in README.md and docs/*.md, each in a
scratch folder where `build` is the build under test and `examples` the
source tree's: a block that fails, or hangs past its limit, fails the test
with the file and line of the block. The C block of README.md ("c
compile") is built and run as its own test (tests/CMakeLists.txt).

    doc_blocks.py SOURCE_DIR BUILD_DIR WORK_DIR [video]
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import time

# "sh cpu video": runs where the build reads and writes video files (the
# fourth argument is "video"), so a KP_VIDEO=OFF build still passes.
# "sh cpu python": runs where Python can load this build's library
# (KP_DOC_PYTHON=1), with the variables in KP_DOC_PY_ENV ("K=V|K=V": a
# sanitizer runtime to preload, say) added for that block alone.
# "sh cpu python video": both.
BLOCK = re.compile(r"^```sh cpu((?: video| python)*)\n(.*?)^```", re.S | re.M)


def blocks(top):
    files = [os.path.join(top, "README.md")] + sorted(glob.glob(os.path.join(top, "docs", "*.md")))
    for f in files:
        text = open(f, encoding="utf-8").read()
        for m in BLOCK.finditer(text):
            yield (os.path.relpath(f, top), text.count("\n", 0, m.start()) + 1, m.group(2),
                   set((m.group(1) or "").split()))


def main(top, build, work, video=""):
    top, build = os.path.abspath(top), os.path.abspath(build)
    found = failed = 0
    for name, line, code, needs in blocks(top):
        if "video" in needs and video != "video":
            print("== %s:%d: skipped (video files not built)" % (name, line))
            continue
        env = dict(os.environ)
        if "python" in needs:
            if os.environ.get("KP_DOC_PYTHON") != "1":
                print("== %s:%d: skipped (Python cannot load this build's library)" % (name, line))
                continue
            for kv in filter(None, os.environ.get("KP_DOC_PY_ENV", "").split("|")):
                k, _, v = kv.partition("=")
                env[k] = v
            # `python3` in the block is the interpreter the build found with
            # NumPy (Debian's, or a venv's), wherever the PATH puts another
            py = os.environ.get("KP_DOC_PYTHON_BIN")
            if py:
                env["PATH"] = os.path.dirname(py) + os.pathsep + env.get("PATH", "")
        found += 1
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        os.symlink(build, os.path.join(work, "build"))
        os.symlink(os.path.join(top, "examples"), os.path.join(work, "examples"))
        os.symlink(os.path.join(top, "python"), os.path.join(work, "python"))
        print("== %s:%d\n%s" % (name, line, code), flush=True)
        t0 = time.monotonic()
        try:
            r = subprocess.run(["bash", "-eo", "pipefail", "-c", code], cwd=work, timeout=600, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = e.stdout or b"", "timed out after 600 s"
        out = out.decode(errors="replace")
        print(out[-3000:])
        print("-- %s:%d took %.1f s" % (name, line, time.monotonic() - t0), flush=True)
        if rc != 0:
            failed += 1
            print("FAIL: %s:%d: exit %s" % (name, line, rc))
    print("%d passed, %d failed" % (found - failed, failed))
    return 1 if failed or not found else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
