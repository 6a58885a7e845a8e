"""Symbolic grading in a child process with a deadline (masrl.tasks.symbolic): what a reply that makes
sympy compute for ever earns, in math_equal and in CHAMP's rule grader, and that the run's process
goes on meanwhile."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable

import pytest

from masrl.tasks import symbolic
from masrl.tasks.champ_grading import grade_summary
from masrl.tasks.math import MathTask, math_equal
from masrl.tasks.symbolic import SymbolicWorker
from masrl.types import TaskItem

# 9^(9^(9^9)): sympy evaluates it against a gold it can evaluate. Against "2^{10}" (which math_verify
# reads as 2) that ran inside one big-integer power holding the GIL: in the run's own process, before
# the child process, no other thread ran again; against "2^10" the grading call never returned.
FOREVER = "9^9^9^9"
GOLD = "2^10"  # not a plain number: math_equal sends the reply to math_verify whole
# Each power within CHAMP's exponent bounds, the tower not: it held the GIL past 60 s in process.
CHAMP_FOREVER = "The answer is ((9999^9999)^200)^200."
CHAMP_REFERENCE = "@@2^(n-1)@@"
CHAMP_QUESTION = "How many subsets of an n-element set have an odd number of elements?"


@pytest.fixture
def worker():
    w = SymbolicWorker(deadline_s=3)
    yield w
    w.close()


@pytest.fixture
def graders(monkeypatch):
    """The graders' own worker, with a deadline short enough for a test."""
    monkeypatch.setattr(symbolic.WORKER, "deadline_s", 3)
    return symbolic.WORKER


def verify(worker: SymbolicWorker) -> Callable[[str, str], bool]:
    return lambda gold, answer: worker("math_verify", gold, answer, default=False)


def graded_on_a_thread(grade: Callable[[], object]) -> tuple[list, int]:
    """`grade()` on another thread, as a rollout sampled ahead scores; its result and how many 0.1 s
    waits the main thread got through meanwhile."""
    out: list = []
    scorer = threading.Thread(target=lambda: out.append(grade()))
    scorer.start()
    ticks = 0
    while scorer.is_alive() and ticks < 600:
        scorer.join(0.1)
        ticks += 1
    assert not scorer.is_alive()
    return out, ticks


def test_symbolic_golds_are_compared_in_the_child(worker):
    # math_verify's readings, not ours: "2^10" is 1024, LaTeX needs its $ signs ("2^{10}" alone reads as 2)
    same = verify(worker)
    assert same(GOLD, "1024") is True
    assert same(GOLD, "1023") is False
    assert same("2^{10}", "1024") is False
    assert same("$\\sqrt{2}$", "$\\frac{2}{\\sqrt{2}}$") is True
    assert same("$\\frac{\\sqrt{3}}{2}$", "$\\frac{1}{2}$") is False


def test_an_answer_that_computes_for_ever_earns_nothing_and_the_run_goes_on(graders):
    """The score comes back (0) once the deadline kills the child, the main thread ran meanwhile, and
    the next comparison has a new child."""
    scores, ticks = graded_on_a_thread(lambda: MathTask().score(TaskItem("i", "q", "2^{10}"), FOREVER))
    assert scores == [0.0]
    assert ticks >= 5  # it waited through the deadline, not behind a GIL held by sympy
    assert graders._child is None  # killed at the deadline
    assert math_equal(GOLD, "1,024") is True  # a plain number against the symbolic gold: a new child
    assert math_equal(GOLD, "1023") is False
    assert graders._child is not None and graders._child.poll() is None


def test_a_champ_summary_that_computes_for_ever_earns_nothing_and_the_run_goes_on(graders):
    assert grade_summary(CHAMP_REFERENCE, CHAMP_QUESTION, "The number is \\(2^{n-1}\\).") is True
    verdicts, ticks = graded_on_a_thread(lambda: grade_summary(CHAMP_REFERENCE, CHAMP_QUESTION, CHAMP_FOREVER))
    assert verdicts == [False] and ticks >= 5
    assert grade_summary(CHAMP_REFERENCE, CHAMP_QUESTION, "It is 2^(n-1).") is True
    assert grade_summary(CHAMP_REFERENCE, CHAMP_QUESTION, "It is 2^n.") is False
    # a number's reference stated as a power goes through the same child: "2^10" for 1024
    assert grade_summary("@@1024@@", "What is 2 to the tenth?", "It is 2^10.") is True
    assert grade_summary("@@1024@@", "What is 2 to the tenth?", CHAMP_FOREVER) is False


def test_a_huge_decimal_exponent_is_no_expression_and_grades_at_once(graders):
    """1e999999 parsed as an exact integer of a million digits: graded 0 only at the deadline."""
    assert grade_summary(CHAMP_REFERENCE, CHAMP_QUESTION, "The answer is 1e999999.") is None  # no expression stated
    assert graders._child is not None  # the child answered: nothing was killed at the deadline


def test_a_graders_own_error_is_raised_in_the_caller(worker):
    with pytest.raises(RuntimeError, match="champ_expression failed in the symbolic grading worker: "):
        worker("champ_expression", "@@1/2@@, a number", 7)  # not text: the grader's own TypeError


def test_a_child_that_died_is_replaced_before_the_next_request(worker):
    assert verify(worker)(GOLD, "1024") is True
    child = worker._child
    child.kill()
    child.wait()
    assert verify(worker)(GOLD, "1024") is True
    assert worker._child.pid != child.pid


def test_a_fork_starts_its_own_child_and_leaves_the_parents_alone(worker):
    """Forked while another thread waits on the parent's child (holding the lock): the fork's first
    comparison starts its own child and answers; the parent's request reaches its deadline as before."""
    same = verify(worker)
    assert same(GOLD, "1024") is True
    parents = worker._child
    waiting: list[bool] = []
    busy = threading.Thread(target=lambda: waiting.append(same("2^{10}", FOREVER)))
    busy.start()
    while not worker._lock.locked():
        busy.join(0.01)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process
        try:
            ok = same(GOLD, "1024") and worker._child.pid != parents.pid
            os.write(write, b"1" if ok else b"0")
            worker.close()
        finally:
            os._exit(0)
    os.close(write)
    answered, _, _ = select.select([read], [], [], 60)
    if not answered:  # the fork is stuck on the lock it inherited
        os.kill(pid, signal.SIGKILL)
    assert answered and os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    busy.join()
    assert waiting == [False]
    assert same(GOLD, "1023") is False and same(GOLD, "1024") is True


def test_close_ends_the_child(worker):
    assert verify(worker)(GOLD, "1024") is True
    child = worker._child
    worker.close()
    assert child.poll() is not None and worker._child is None


def test_a_worker_that_cannot_start_is_one_clear_error(worker, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="symbolic grading worker .* did not start"):
        verify(worker)(GOLD, "1024")
