"""The turn loop system (masrl/systems/turns/system.py) with scripted agents: observations, commits,
rewards recorded per component, stopping, and the per-turn greedy tree over it."""

from __future__ import annotations

import asyncio

import pytest

from masrl.agents.python_fn import FunctionAgent
from masrl.rollout.rules import PerTurnGreedy
from masrl.rollout.tree import Parallel, expand
from masrl.systems.turns.system import ROLE_PROMPTS, TurnsSystem
from masrl.tasks.planpath import PlanPathTask
from masrl.types import Reply, TaskItem

# ....     start (0,0), goal (2,3); Manhattan d0 = 5; shortest path 5 moves
# .##.
# ....
ITEM = TaskItem("pp/0", "grid", "R R R D D", {"rows": ["....", ".##.", "...."], "start": [0, 0], "goal": [2, 3]})
TASK = PlanPathTask.__new__(PlanPathTask)  # the environment needs no generator


def system(agents=("tool", "planner"), max_turns=2, mix="lambda") -> TurnsSystem:
    return TurnsSystem(TASK, agents, {r: ROLE_PROMPTS[r] for r in agents}, max_turns, mix, code_roles=("tool",))


def reply(text: str) -> Reply:
    return Reply(text, 1, 1, 0.0)


def test_one_turn_by_hand():
    sys = system()
    state = sys.start(ITEM)
    step = sys.next_step(state)
    assert (step.agent, step.turn) == ("tool", 0) and "A...\n.##.\n...G" in step.messages[1].content
    assert "Turn 1 of 2. You are the tool." in step.messages[1].content
    # the tool proposes [R, R, R]: a proposal, the agent does not move; team (5-2)/5 = .6
    tr = sys.advance(state, step, reply("#### [R, R, R]"))
    assert tr.state.env.pos == (0, 0) and not tr.done
    assert tr.rewards["team"] == pytest.approx(0.6) and tr.rewards["local"] == pytest.approx(1.0)
    assert tr.reward == pytest.approx(0.5 * 0.6 + 0.5 * 1.0)
    assert tr.rewards["format"] == 1.0 and tr.rewards["correct"] == 0.0
    # the planner sees the tool's output in its observation and commits [R, R, R, D, D]: goal, done
    step = sys.next_step(tr.state)
    assert step.agent == "planner" and "[turn 1] tool: [R, R, R]" in step.messages[1].content
    tr2 = sys.advance(tr.state, step, reply("Following the tool.\n#### [R, R, R, D, D]"))
    assert tr2.state.env.pos == (2, 3) and tr2.done
    assert tr2.rewards["team"] == 1.0 and tr2.rewards["correct"] == 1.0 and tr2.reward == pytest.approx(1.0)


def test_malformed_actions_are_format_failures_and_the_loop_stops_after_t_turns():
    sys = system(max_turns=2)
    state, done, turns = sys.start(ITEM), False, []
    while not done:
        step = sys.next_step(state)
        tr = sys.advance(state, step, reply("I am not sure what to do"))
        assert tr.rewards["format"] == 0.0 and tr.rewards["local"] == 0.0 and tr.reward == 0.0
        turns.append((step.agent, step.turn))
        state, done = tr.state, tr.done
    assert turns == [("tool", 0), ("planner", 0), ("tool", 1), ("planner", 1)]


def test_tool_code_runs_in_the_sandbox_and_its_output_is_the_action():
    sys = system()
    state = sys.start(ITEM)
    tr = sys.advance(state, sys.next_step(state), reply("```python\nprint('[R, R, R, D]')\n```"))
    assert tr.action == ("R", "R", "R", "D") and tr.rewards["team"] == pytest.approx(0.8)
    assert "its program printed: [R, R, R, D]" in tr.state.history[-1]
    tr = sys.advance(state, sys.next_step(state), reply("```python\nprint(undefined)\n```"))
    assert tr.action is None and "its program failed (error): NameError" in tr.state.history[-1]


def test_alpha_mix_and_bad_agents():
    sys = system(mix="alpha")
    state = sys.start(ITEM)
    tr = sys.advance(state, sys.next_step(state), reply("#### [R, R, R]"))
    assert tr.reward == pytest.approx(0.6 + 1.0)  # alpha 1: team + local
    with pytest.raises(ValueError, match="must be a role of the task"):
        system(agents=("coder",))


def test_per_turn_greedy_tree_over_the_system():
    """K = 2: the tool's better proposal is what the planner sees; the planner's better action commits."""
    answers = {
        "tool": iter(["#### [L]", "#### [R, R, R]"]),  # illegal vs .6 team: the second continues
        "planner": iter(["#### [D]", "#### [R, R, R, D, D]"]),  # the second reaches the goal
    }

    def scripted(role):
        async def fn(messages):
            return next(answers[role])

        return FunctionAgent(role, fn)

    agents = {r: scripted(r) for r in ("tool", "planner")}
    ep = asyncio.run(expand(system(), agents, ITEM, PerTurnGreedy(2)))
    assert [(c.id, c.agent) for c in ep.calls] == [("0", "tool"), ("1", "tool"), ("1.0", "planner"), ("1.1", "planner")]
    assert "[turn 1] tool: [R, R, R]" in ep.calls[2].messages[1].content
    assert ep.calls[3].done and ep.calls[3].rewards["correct"] == 1.0
    answers["planner"] = iter(["#### [R]"])
    single = asyncio.run(expand(system(agents=("planner",), max_turns=1), {"planner": scripted("planner")}, ITEM, Parallel(1)))
    assert len(single.calls) == 1 and single.calls[0].done  # one agent, one turn: the single-agent baseline


def test_config_mistakes_are_clear():
    from masrl.config import ConfigError
    from masrl.loading import load_config
    from masrl.registry import build_task

    with pytest.raises(ConfigError, match="system.kind 'turns' runs only task families made for it"):
        load_config("turns-planpath", ["task.kind=math"])
    with pytest.raises(ConfigError, match="task.kind 'sudoku' is made for system.kind 'turns'"):
        load_config("single-arithmetic", ["task.kind=sudoku"])
    with pytest.raises(ConfigError, match="system.mix"):
        load_config("turns-planpath", ["system.mix=product"])
    with pytest.raises(ConfigError, match="task.config for planpath"):
        build_task(load_config("turns-planpath", ["task.config={bogus: 1}"]).task)
    with pytest.raises(ConfigError, match="task.config for sudoku: blanks"):
        build_task(load_config("turns-sudoku", ["task.config={blanks: 40}"]).task)
    from masrl.systems.turns.system import build_turns

    config = load_config("turns-planpath", ["system.agents=[planner,coder]"])
    with pytest.raises(ConfigError, match=r"name \['coder'\]; the roles of task 'planpath' are \['tool', 'planner'\]"):
        build_turns(config, build_task(config.task))


def test_branching_factor_one_equals_parallel():
    """An equivalence: the per-turn tree with K = 1 is one parallel episode, call for call."""

    def agents():
        replies = {"tool": iter(["#### [R]", "#### [D]"]), "planner": iter(["#### [R, R]", "#### [R]"])}

        def scripted(role):
            async def fn(messages):
                return next(replies[role])

            return FunctionAgent(role, fn)

        return {r: scripted(r) for r in ("tool", "planner")}

    tree = asyncio.run(expand(system(), agents(), ITEM, PerTurnGreedy(1)))
    par = asyncio.run(expand(system(), agents(), ITEM, Parallel(1)))
    assert tree == par and len(tree.calls) == 4


def test_prefill_starts_the_reply_and_is_parsed_with_it():
    sys = TurnsSystem(TASK, ("planner",), {"planner": "plan"}, 1, prefill={"planner": "#### ["})
    state = sys.start(ITEM)
    step = sys.next_step(state)
    assert step.messages[-1].role == "assistant" and step.messages[-1].content == "#### ["
    tr = sys.advance(state, step, reply("R, R, R, D, D]"))
    assert tr.action == ("R", "R", "R", "D", "D") and tr.rewards["correct"] == 1.0
    assert tr.state.history[-1] == "[turn 1] planner: [R, R, R, D, D]"


def test_answer_role_makes_the_tool_agents_printed_answer_decide_the_episode():
    """turns-math-single-tool: one tool agent, its program's printed output is the episode's answer (`correct` 1 for
    the right number), where without answer_role the reasoner, who never acts, would decide (always 0); a task that
    decides by its state, or a role not among the agents, is refused."""
    from masrl.config import ConfigError
    from masrl.loading import load_config
    from masrl.registry import build_task
    from masrl.systems.turns.system import build_turns

    config = load_config("turns-math-single-tool")
    task = build_task(config.task)
    item = task.items("eval", 0, 1)[0]
    code = f"```python\nprint({item.answer})\n```"
    for overrides, correct in (([], 1.0), (["system.answer_role=null"], 0.0)):
        sys = build_turns(load_config("turns-math-single-tool", overrides), task).system
        state = sys.start(item)
        tr = sys.advance(state, sys.next_step(state), reply(code))
        assert tr.rewards["correct"] == correct and tr.done
    with pytest.raises(ConfigError, match="system.answer_role is for task math_turns"):
        planpath = load_config("turns-planpath", ["system.answer_role=tool"])
        build_turns(planpath, build_task(planpath.task))
    with pytest.raises(ConfigError, match=r"system.answer_role 'reasoner' must be one of system.agents \['tool'\]"):
        build_turns(load_config("turns-math-single-tool", ["system.answer_role=reasoner"]), task)
