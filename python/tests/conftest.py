"""The suite runs against the library KPIPE_LIBRARY names (ctest sets it to
the build's libkpipe.so) and the package beside this folder."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
ROOT = os.path.dirname(os.path.dirname(HERE))


def example(name):
    return os.path.join(ROOT, "examples", name)
