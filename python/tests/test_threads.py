"""Threads on one object, on the cpu backend: every output checked against
its own thread's inputs, every refusal checked for its status and the
threads it names, and the object checked whole afterwards.

The interpreter switches threads every microsecond here (as often as it
can), and the library's calls release the GIL, so calls overlap in C as
they would on a free-threaded interpreter; where an overlap must happen,
a work function, task, stage or host function holds the first call
until the second thread has tried (events, not sleeps)."""
import sys
import threading

import numpy as np
import pytest

import kpipe
from kpipe._core import Inflight

THREADS, CALLS, N = 4, 50, 257


@pytest.fixture(autouse=True)
def busy_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def sample_spec(mode):
    """y = relu(a + b) over N floats."""
    return {"kpipe_spec": 1, "name": "sample", "execution": mode,
            "modules": [{"type": "engine", "id": "a", "params": {"size": N}},
                        {"type": "relu", "id": "b", "params": {"size": N}}],
            "connections": ["a.result0 -> b.input"],
            "inputs": {"input0": "a.arg0", "input1": "a.arg1"},
            "outputs": {"output": "b.output"}}


def inputs(t, k):
    """Thread t's k-th inputs: distinct for every (t, k), and their output."""
    a = np.arange(N, dtype=np.float32) * (t + 1) - 100.0 * k
    b = np.full(N, 1000.0 * t + k, np.float32)
    return a, b, np.maximum(a + b, 0)


def run_threads(fn, n=THREADS):
    """fn(t) on n threads started together; their results, or re-raises
    the first unexpected exception."""
    start = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(t):
        start.wait()
        try:
            results[t] = fn(t)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(t,), name="worker-%d" % t) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def tally(p, call):
    """Per thread: CALLS calls of call(t, k); each either its own right
    output, or a refusal. No thread ends before every thread has made its
    calls: a holder that has ended lets go by design, and a thread still
    calling would then take the object over (a loaded machine finishes the
    holder's calls first)."""
    end = threading.Barrier(THREADS)

    def body(t):
        ok, refused = 0, []
        try:
            for k in range(CALLS):
                try:
                    call(t, k)
                    ok += 1
                except kpipe.Error as e:
                    refused.append(e)
        finally:
            end.wait(timeout=300)
        return ok, refused
    return run_threads(body)


def check_one_holder(obj, results, what):
    """Exactly one thread made every call; each other had every call
    refused, by name."""
    holders = [t for t, (ok, _) in enumerate(results) if ok]
    assert len(holders) == 1, [(ok, len(r)) for ok, r in results]
    h = holders[0]
    assert results[h] == (CALLS, [])
    assert obj.thread is not None and obj.thread.name == "worker-%d" % h
    for t, (ok, refused) in enumerate(results):
        if t == h:
            continue
        assert ok == 0 and len(refused) == CALLS
        for e in refused:
            assert e.status == "KP_ERR_STATE", e
            assert what in e.detail and "'worker-%d'" % h in e.detail and \
                "'worker-%d'" % t in e.detail and "release_thread()" in e.detail, e.detail


# --- Pipeline ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["graph", "stream"])
def test_pipeline_second_thread_refused(mode):
    p = kpipe.Pipeline(sample_spec(mode), device="cpu")

    def call(t, k):
        a, b, want = inputs(t, k)
        y = p({"input0": a, "input1": b})["output"].numpy()
        np.testing.assert_array_equal(y, want, err_msg="thread %d call %d" % (t, k))
    check_one_holder(p, tally(p, call), "kpipe.Pipeline 'sample' is in use by thread")
    # the holder's ticks left it whole: this thread may not tick, the
    # holder has ended, so it lets go
    a, b, want = inputs(9, 9)
    np.testing.assert_array_equal(p(input0=a, input1=b)["output"].numpy(), want)
    assert p.thread is threading.current_thread()
    if mode == "graph":
        assert p.stats()["calls"] == CALLS + 1


def test_pipeline_threads_take_turns():
    """Workers that hand the pipeline over after reading their outputs, while
    other threads sync it and read its counters: every output is its own."""
    p = kpipe.Pipeline(sample_spec("graph"), device="cpu")
    turn = threading.Lock()
    done = threading.Event()

    def worker(t):
        for k in range(CALLS):
            a, b, want = inputs(t, k)
            with turn:
                y = p({"input0": a, "input1": b})["output"].numpy().copy()
                p.release_thread()
            np.testing.assert_array_equal(y, want, err_msg="thread %d call %d" % (t, k))

    def watcher():
        while not done.is_set():
            p.sync()
            p.stats()
            p.report()
    w = threading.Thread(target=watcher)
    w.start()
    try:
        run_threads(worker)
    finally:
        done.set()
        w.join()
    assert p.stats()["calls"] == THREADS * CALLS
    assert p.thread is None


def test_pipeline_release_and_close_from_other_threads():
    p = kpipe.Pipeline(sample_spec("stream"), device="cpu")
    a, b, want = inputs(0, 0)
    p(input0=a, input1=b)
    errors = []

    def other():
        try:
            p.release_thread()
        except kpipe.Error as e:
            errors.append(e)
    th = threading.Thread(target=other, name="stranger")
    th.start()
    th.join()
    assert errors and errors[0].status == "KP_ERR_STATE" and "'stranger'" in errors[0].detail
    out = p(input0=a, input1=b)["output"]
    th = threading.Thread(target=p.close)  # from another thread: waits, then closes
    th.start()
    th.join()
    np.testing.assert_array_equal(out.numpy(), want)  # a view outlives close()
    with pytest.raises(kpipe.Error) as e:
        p(input0=a, input1=b)
    assert e.value.status == "KP_ERR_STATE" and "closed" in e.value.detail


# --- GraphCache ----------------------------------------------------------------------------
def double(stream, ins, outs, lits):
    x, y = ins[0], outs[0]
    stream.host_func(lambda: np.multiply(x.numpy(), 2, out=y.numpy()))


def test_graph_cache_second_thread_refused():
    c = kpipe.GraphCache("cpu")

    def call(t, k):
        n = 1 + (t * CALLS + k) % 64  # several keys: misses and hits
        x = np.arange(n, dtype=np.float32) + 10000 * t + k
        y, = c.run(double, [x], [("f32", (n,))])
        np.testing.assert_array_equal(y.numpy(), x * 2, err_msg="thread %d call %d" % (t, k))
    check_one_holder(c, tally(c, call), "kpipe.GraphCache is in use by thread")
    assert c.stats()["calls"] == CALLS


def test_graph_cache_overlap_waits_or_refuses():
    """While the holder is inside run() (its work function held), another
    thread's run() is refused at once, its stats() waits for the call, and
    the work function's own call on the cache is refused."""
    c = kpipe.GraphCache("cpu")
    inside, go = threading.Event(), threading.Event()
    seen = {}

    def held(stream, ins, outs, lits):
        try:
            c.stats()
        except kpipe.Error as e:
            seen["reentered"] = e
        inside.set()
        go.wait()
        stream.copy(outs[0], ins[0])

    x = np.arange(N, dtype=np.float32)
    got = {}

    def holder():
        got["y"] = c.run(held, [x], [("f32", (N,))])[0].numpy().copy()

    def reader():
        got["stats"] = c.stats()
    h = threading.Thread(target=holder, name="holder")
    h.start()
    assert inside.wait(30)
    with pytest.raises(kpipe.Error) as e:
        c.run(held, [x], [("f32", (N,))])
    assert e.value.status == "KP_ERR_STATE" and "'holder'" in e.value.detail
    r = threading.Thread(target=reader)
    r.start()
    r.join(0.05)
    assert r.is_alive()  # it waits for the holder's call
    go.set()
    h.join()
    r.join()
    np.testing.assert_array_equal(got["y"], x)
    assert got["stats"]["calls"] == 1 and got["stats"]["captures"] == 1
    e = seen["reentered"]
    assert e.status == "KP_ERR_STATE" and "inside one of its own calls" in e.detail


# --- Tasks ---------------------------------------------------------------------------------
def test_tasks_second_thread_refused():
    t = kpipe.Tasks("cpu", streams=2)
    bufs = {}

    def call(th, k):
        if th not in bufs:
            bufs[th] = t.tensor("f32", (N,))
        a = bufs[th]
        value = np.float32(1000 * th + k)

        def fill(stream, v):
            out = v[0]
            stream.host_func(lambda: out.numpy().fill(value))
        t.submit(fill, ("out", a))
        t.run()
        t.sync()
        got = t.data(a).numpy()
        assert (got == value).all(), (th, k, got[:4])
    check_one_holder(t, tally(t, call), "kpipe.Tasks is in use by thread")
    assert t.stats()["runs"] == CALLS


def test_tasks_function_calling_its_own_set_is_refused():
    t = kpipe.Tasks("cpu")
    a = t.tensor("f32", (4,))
    seen = []

    def sneaky(stream, v):
        try:
            t.submit(sneaky, ("out", a))
        except kpipe.Error as e:
            seen.append(e)
    t.submit(sneaky, ("out", a))
    t.run()
    t.sync()
    assert len(seen) == 1 and seen[0].status == "KP_ERR_STATE"
    assert "inside one of its own calls" in seen[0].detail and t.stats()["runs"] == 1


# --- Flow ----------------------------------------------------------------------------------
def test_flow_waited_and_started_by_several_threads():
    frames = 64
    held, go = threading.Event(), threading.Event()
    done = []

    def source(frame):
        if frame.seq == 0:
            held.set()
            go.wait()
        return frame.seq < frames

    def sink(frame):
        done.append(frame.seq)
    f = kpipe.Flow.of([source, sink], device="cpu", frame_bytes=16)
    starts = run_threads(lambda t: _status_of(f.start), n=2)
    assert sorted(starts) == ["KP_ERR_STATE", "KP_OK"]
    assert held.wait(30)
    waits = {}

    def waiter(t):
        f.wait()
        waits[t] = len(done)

    def health(t):
        for _ in range(20):
            assert len(f.health()["stages"]) == 2
    ws = [threading.Thread(target=waiter, args=(t,)) for t in range(3)]
    for w in ws:
        w.start()
    run_threads(health)  # from several threads while the flow runs
    for w in ws:
        w.join(0.02)
        assert w.is_alive()  # nobody returns before the end
    go.set()
    for w in ws:
        w.join()
    assert waits == {0: frames, 1: frames, 2: frames}
    assert sorted(done) == list(range(frames))


def test_flow_stage_exception_raised_from_every_waiter():
    go = threading.Event()

    def source(frame):
        go.wait()
        return frame.seq < 10

    def bad(frame):
        if frame.seq == 3:
            raise KeyError("frame 3")
    f = kpipe.Flow.of([source, ("bad", bad), lambda fr: None], device="cpu", frame_bytes=16)
    f.start()
    errors = []

    def waiter(t):
        try:
            f.wait()
        except kpipe.Error as e:
            errors.append(e)
    ws = [threading.Thread(target=waiter, args=(t,)) for t in range(2)]
    for w in ws:
        w.start()
    go.set()
    for w in ws:
        w.join()
    assert len(errors) == 2
    for e in errors:
        assert "bad" in e.detail and isinstance(e.__cause__, KeyError)


def _status_of(fn):
    try:
        fn()
        return "KP_OK"
    except kpipe.Error as e:
        return e.status


# --- Stream, Device, Inflight ----------------------------------------------------------------
def test_stream_shared_by_threads():
    s = kpipe.device("cpu").stream()
    order = []

    def enqueue(t):
        for k in range(CALLS):
            s.host_func(lambda t=t, k=k: order.append((t, k)))
    run_threads(enqueue)
    s.sync()
    assert len(order) == THREADS * CALLS
    for t in range(THREADS):  # each thread's work in its own order
        assert [k for th, k in order if th == t] == list(range(CALLS))

    def boom():
        raise ValueError("host function")
    s.host_func(boom)
    outcomes = run_threads(lambda t: _raised(s.sync))
    assert sorted(outcomes, key=str) == [None, None, None, "ValueError"]


def _raised(fn):
    try:
        fn()
        return None
    except ValueError:
        return "ValueError"


def test_device_makes_its_default_stream_once():
    dev = kpipe.Device("cpu:3")  # a device of its own, no default stream yet
    streams = run_threads(lambda t: dev.default_stream)
    assert all(s is streams[0] for s in streams)


def test_inflight_bookkeeping_from_threads():
    """The bookkeeping the objects share: adds and retires from several
    threads at once (two streams, so sets are sealed on every change)."""
    dev = kpipe.device("cpu")
    streams = [dev.stream(), dev.stream()]
    box = Inflight(dev)

    def body(t):
        for k in range(CALLS * 4):
            box.add(streams[(t + k) % 2], [np.zeros(1)])
            if k % 7 == 0:
                box.retire(wait=k % 14 == 0)
            len(box)
    run_threads(body)
    box.retire(wait=True)
    assert len(box) == 0
