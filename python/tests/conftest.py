"""The suite runs against the library KPIPE_LIBRARY names (ctest sets it to
the build's libkpipe.so) and the package beside this folder."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
ROOT = os.path.dirname(os.path.dirname(HERE))


def example(name):
    return os.path.join(ROOT, "examples", name)


def has_cuda():
    """Whether this machine has a cuda device kpipe opens."""
    import kpipe
    try:
        kpipe.device("cuda")
        return True
    except kpipe.Error:
        return False


def same_strides(shape, a, b):
    """Whether strides a and b lay out `shape` alike: those of a dimension
    of one element mean nothing, nor any of an empty tensor (producers and
    their versions write them differently; kp_desc_is_contiguous reads them
    so)."""
    if 0 in shape:
        return True
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b))
