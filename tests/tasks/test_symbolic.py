"""math_verify in a child process with a deadline (masrl.tasks.symbolic): what a reply that makes sympy
compute for ever earns, and that the run's process goes on meanwhile."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading

import pytest

import masrl.tasks.math as math_task
from masrl.tasks.math import MathTask, math_equal
from masrl.tasks.symbolic import SymbolicVerifier
from masrl.types import TaskItem

# 9^(9^(9^9)): sympy evaluates it against a gold it can evaluate. Against "2^{10}" (which math_verify
# reads as 2) that ran inside one big-integer power holding the GIL: in the run's own process, before
# the child process, no other thread ran again; against "2^10" the grading call never returned.
FOREVER = "9^9^9^9"
GOLD = "2^10"  # not a plain number: math_equal sends the reply to math_verify whole


@pytest.fixture
def verifier():
    v = SymbolicVerifier(deadline_s=3)
    yield v
    v.close()


def test_symbolic_golds_are_compared_in_the_child(verifier):
    # math_verify's readings, not ours: "2^10" is 1024, LaTeX needs its $ signs ("2^{10}" alone reads as 2)
    assert verifier(GOLD, "1024") is True
    assert verifier(GOLD, "1023") is False
    assert verifier("2^{10}", "1024") is False
    assert verifier("$\\sqrt{2}$", "$\\frac{2}{\\sqrt{2}}$") is True
    assert verifier("$\\frac{\\sqrt{3}}{2}$", "$\\frac{1}{2}$") is False


def test_an_answer_that_computes_for_ever_earns_nothing_and_the_run_goes_on(verifier, monkeypatch):
    """Scored on a rollout thread, as when sampling runs ahead: the score comes back (0) once the
    deadline kills the child, the main thread ran meanwhile, and the next comparison has a new child."""
    monkeypatch.setattr(math_task, "_symbolic", verifier)
    item = TaskItem("i", "q", "2^{10}")
    scores: list[float] = []
    scorer = threading.Thread(target=lambda: scores.append(MathTask().score(item, FOREVER)))
    scorer.start()
    ticks = 0
    while scorer.is_alive() and ticks < 600:  # the main thread keeps running while the child computes
        scorer.join(0.1)
        ticks += 1
    assert not scorer.is_alive() and scores == [0.0]
    assert ticks >= 5  # it ran through the deadline's wait, not past a GIL held by sympy
    first = verifier._child
    assert first is None  # killed at the deadline
    assert math_equal(GOLD, "1,024") is True  # a plain number against the symbolic gold: a new child
    assert math_equal(GOLD, "1023") is False
    assert verifier._child is not None and verifier._child.poll() is None


def test_a_child_that_died_is_replaced_before_the_next_request(verifier):
    assert verifier(GOLD, "1024") is True
    child = verifier._child
    child.kill()
    child.wait()
    assert verifier(GOLD, "1024") is True
    assert verifier._child.pid != child.pid


def test_a_fork_starts_its_own_child_and_leaves_the_parents_alone(verifier):
    """Forked while another thread waits on the parent's child (holding the lock): the fork's first
    comparison starts its own child and answers; the parent's child and its request go on."""
    assert verifier(GOLD, "1024") is True
    parents = verifier._child
    waiting: list[bool] = []
    busy = threading.Thread(target=lambda: waiting.append(verifier("2^{10}", FOREVER)))
    busy.start()
    while not verifier._lock.locked():
        busy.join(0.01)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process
        try:
            ok = verifier(GOLD, "1024") and verifier._child.pid != parents.pid
            os.write(write, b"1" if ok else b"0")
            verifier.close()
        finally:
            os._exit(0)
    os.close(write)
    answered, _, _ = select.select([read], [], [], 60)
    if not answered:
        os.kill(pid, signal.SIGKILL)
    assert answered and os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    busy.join()
    assert waiting == [False]  # the parent's request reached its deadline as before
    assert verifier(GOLD, "1023") is False and verifier(GOLD, "1024") is True


def test_close_ends_the_child(verifier):
    assert verifier(GOLD, "1024") is True
    child = verifier._child
    verifier.close()
    assert child.poll() is not None and verifier._child is None


def test_a_worker_that_cannot_start_is_one_clear_error(verifier, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="math_verify worker .* did not start"):
        verifier(GOLD, "1024")
