"""The simulated pool's worked drafts: wrong drafts end in a number that is not gold, visible slips, false steps carried forward, draft styles."""

import pytest

from masrl.pools.drafts import CONSISTENT, VISIBLE, DraftStyle, draft_style, visible_draft
from masrl.pools.simulated import SimulatedAgent
from masrl.pools.slips import check_draft
from masrl.tasks.math import MathTask, extract_math_answer, math_equal
from masrl.types import Message, Price, TaskItem


def test_drafts_end_in_gold_or_in_a_number_that_is_not_gold(pool, items):
    mixed = items + MathTask("gsm_symbolic", seed=0, chunk_size=60).items("train", 0, 40)
    odd = [TaskItem(f"odd/{g}", f"Odd question {g}?", g) for g in ("0", "-3/4", "2.5", "1,000", "x+1", "abc")]
    weak = pool["sim-weak"]
    wrong = 0
    for item in mixed + odd:
        for attempt in range(2):
            reply = weak.reply_for(item, (Message("user", item.question),), attempt)
            answer = extract_math_answer(reply.text)
            assert reply.text.rstrip(".").endswith(f"<answer>{answer}</answer>")
            if weak.is_correct(item, attempt):
                assert math_equal(item.answer, answer), (item.answer, reply.text)
            else:
                wrong += 1
                assert answer and not math_equal(item.answer, answer), (item.answer, reply.text)
    assert wrong > 200


# ---- visible drafts ----------------------------------------------------------------


def test_visible_drafts_show_a_slip_in_exactly_the_wrong_drafts_drawn_visible(items):
    """Right drafts: every line true, the answer the last line's value. Wrong drafts: a checkable slip
    (check_draft) with probability visible_rate, split between false steps and answer mismatches by
    false_step_share; the rest work out a misread expression with nothing to see."""
    style = DraftStyle(visible_rate=0.6, false_step_share=0.75)
    weak = SimulatedAgent("sim-weak", 0.5, Price(), seed=0, task=items, drafts=style)
    right = wrong = visible = false_steps = 0
    for item in items:
        for attempt in range(3):
            reply = weak.reply_for(item, (Message("user", item.question),), attempt)
            answer = extract_math_answer(reply.text)
            report = check_draft(reply.text, answer)
            assert report.equations >= 1, reply.text
            if weak.is_correct(item, attempt):
                right += 1
                assert math_equal(item.answer, answer) and not report.visible, reply.text
                continue
            wrong += 1
            assert answer and not math_equal(item.answer, answer), reply.text
            visible += report.visible
            false_steps += report.false_steps > 0
    assert right > 200 and wrong > 400
    # binomial: 3 standard deviations of the share at these counts
    assert abs(visible / wrong - 0.6) < 3 * (0.6 * 0.4 / wrong) ** 0.5
    assert abs(false_steps / visible - 0.75) < 3 * (0.75 * 0.25 / visible) ** 0.5


def test_false_steps_write_numbers_wrong_in_the_measured_mix(items):
    """The first false step of visible wrong drafts, classified as the calibration classified SmolLM2's
    (slips.slip_kind), follows SLIP_MIX; a single digit changed can also read as near or off by one."""
    from collections import Counter
    from fractions import Fraction

    from masrl.pools.drafts import SLIP_MIX
    from masrl.pools.slips import equations, slip_kind

    weak = SimulatedAgent("sim-weak", -3.0, Price(), seed=1, task=items, drafts=DraftStyle(1.0, 1.0))
    kinds = Counter()
    for item in items:
        for attempt in range(4):
            text = weak.reply_for(item, (Message("user", item.question),), attempt).text
            bad = next((e for e in equations(text) if not e.holds), None)
            if bad is not None:
                kinds[slip_kind(bad.value, Fraction(bad.stated))] += 1
    n = sum(kinds.values())
    assert n > 900 and kinds["none"] == 0 and kinds["magnitude"] / n < 0.01  # an "other" can land on x10
    for kind, share in SLIP_MIX:
        slack = 0.05 if kind in ("other", "sign") else 0.09
        assert abs(kinds[kind] / n - share) < slack, (kind, kinds)


def test_a_false_step_is_carried_into_every_later_line():
    item = TaskItem("t/1", "Calculate ( 14 + 30 ) * 2 - 8.", "80", {"expression": "( 14 + 30 ) * 2 - 8"})
    drafts = {}
    for seed in range(60):  # draw until each slipped step appears
        text = visible_draft(item, False, (seed, "w", item.id, item.question, 0), DraftStyle(1.0, 1.0), None)
        lines = [line for line in text.splitlines() if "=" in line and "<answer>" not in line]
        first_false = next(i for i, line in enumerate(lines) if not check_draft(line, None).false_steps == 0)
        drafts.setdefault(first_false, text)
        # every later line starts from the value the line before wrote
        for before, after in zip(lines, lines[1:]):
            assert after.split(" ")[0] == before.split("= ")[-1], text
        assert extract_math_answer(text) == lines[-1].split("= ")[-1]
    assert set(drafts) == {0, 1, 2}


def test_the_draft_style_changes_the_text_never_the_draw(items):
    plain = SimulatedAgent("sim-medium", 1.62, Price(), seed=3, task=items)
    shown = SimulatedAgent("sim-medium", 1.62, Price(), seed=3, task=items, drafts=VISIBLE)
    assert plain.drafts is CONSISTENT
    for item in items[:120]:
        a, b = (agent.reply_for(item, (Message("user", item.question),), 0).text for agent in (plain, shown))
        assert "Reading the expression as" in a and "Reading the expression as" not in b
        assert math_equal(item.answer, extract_math_answer(a)) == math_equal(item.answer, extract_math_answer(b))


def test_draft_style_by_name():
    assert draft_style("consistent") is CONSISTENT and draft_style("visible") is VISIBLE
    assert draft_style("visible", 0.25) == DraftStyle(0.25, VISIBLE.false_step_share)
    with pytest.raises(ValueError, match="unknown draft style"):
        draft_style("loud")
