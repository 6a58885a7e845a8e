"""scripts/router_bounds.py: scripted controllers in the router's evaluation, checked against the pool's own draws."""

import pytest

from masrl.pools.drafts import VISIBLE
from masrl.pools.simulated import simulated_pool
from masrl.pools.slips import check_draft
from masrl.systems.router.rewards import Multipliers, default_caps, default_multipliers
from masrl.systems.router.system import VERIFY_USER, VERIFY_USER_NUMBERED, RouterSystem
from masrl.tasks.math import MathTask
from masrl.types import Message


@pytest.fixture(scope="module")
def rb(load_script):
    return load_script("router_bounds")


def test_template_fields_reads_back_what_format_wrote(rb):
    draft = "3 + 4 = 7\nIs it right? no\nSo the answer is <answer>7</answer>."
    text = VERIFY_USER_NUMBERED.format(question="Calculate 3 + 4.", author="sim-weak", draft=draft)
    assert rb.template_fields(VERIFY_USER_NUMBERED, text) == {"question": "Calculate 3 + 4.", "author": "sim-weak",
                                                              "draft": draft}
    text = VERIFY_USER.format(question="Calculate 1 - 2.", author="w", draft="1 - 2 = -1")
    assert rb.template_fields(VERIFY_USER, text)["draft"] == "1 - 2 = -1"
    assert rb.template_fields(VERIFY_USER_NUMBERED, "Problem: x") is None


@pytest.mark.parametrize("labels", ["numbers", "names"])
def test_verdict_rules_on_the_weak_agents_drafts(rb, labels):
    """Everything to the weak agent; then each verdict rule's False verdicts and the final accuracy are
    exactly what the pool's own draws and `check_draft` on the weak drafts say they must be."""
    task = MathTask("basic_arithmetic", seed=0, difficulty="medium")
    # one item per question: the pool finds an item by its question, so a repeated question would draw
    # its first item's next attempt
    first: dict = {}
    for it in task.items("eval", 0, 41):
        first.setdefault(it.question.strip(), it)
    items = list(first.values())[:40]
    assert len(items) == 40
    pool = simulated_pool("three", seed=0, task=items, drafts=VISIBLE)
    names = tuple(pool)
    weak, medium = pool[names[0]], pool[names[1]]
    system = RouterSystem(task, names, Multipliers(default_multipliers(names), default_caps(names)), max_turns=3,
                          labels=labels, final_verification=False)
    rho = {names[0]: 1.0, names[1]: 1.0, names[2]: 1.0}  # no caps: every False reaches the medium agent
    results = {r.method.split(" + ")[1]: r for r in rb.bounds(system, pool, task, items, rho, {"weak": lambda q: names[0]})}

    def user(item):  # what the weak agent is shown, so its draft here is the one the evaluation saw
        return system.agent_messages(system.start(item))

    weak_right = [weak.is_correct(it, 0) for it in items]
    drafts = [weak.reply_for(it, user(it), 0).text for it in items]
    visible = [check_draft(d, task.extract_answer(d)).visible for d in drafts]
    assert not any(v for v, ok in zip(visible, weak_right) if ok)  # right drafts never show a slip
    n_wrong = weak_right.count(False)
    assert 0 < sum(visible) < n_wrong  # some wrong drafts show their slip, some do not

    medium_right = [medium.is_correct(it, 0) for it in items]
    none = results["always True"]
    assert none.accuracy == pytest.approx(sum(weak_right) / 40)
    assert rb.rates(none) == (1.0, 0.0)
    truth = results["truth"]
    assert rb.rates(truth) == (1.0, 1.0)
    assert truth.accuracy == pytest.approx(sum(w or m for w, m in zip(weak_right, medium_right)) / 40)
    seen = results["visible slips"]
    assert rb.rates(seen) == (1.0, pytest.approx(sum(visible) / n_wrong))
    assert seen.accuracy == pytest.approx(sum(m if v else w for w, m, v in zip(weak_right, medium_right, visible)) / 40)


def test_scripted_controller_refuses_a_system_without_prefill(rb):
    system = RouterSystem(None, ("a", "b"), Multipliers({}, {}), prefill=False)
    with pytest.raises(ValueError, match="prefill"):
        rb.scripted_controller(system, lambda q: "a", lambda q, d: True)
    agent = rb.scripted_controller(RouterSystem(None, ("a", "b"), Multipliers({}, {})), lambda q: "a", lambda q, d: True)
    with pytest.raises(ValueError, match="not a routing prompt"):
        agent.fn((Message("system", "s"), Message("user", "hello"), Message("assistant", "<model>")))
