"""The CHAMP task: replayed responses score by their recorded grade (the pool: tests/pools/test_champ.py)."""


def test_champ_task_scores_replayed_responses_by_their_recorded_grade(champ):
    from masrl.tasks.champ import ChampTask
    from masrl.tasks.base import Task, grade

    summary, tasks, agents, rows = champ
    task = ChampTask(summary.path)
    assert isinstance(task, Task)
    train, held = task.items("train", 0, 400), task.items("eval", 0, 400)
    assert len(held) + len({t.id for t in train}) == 270 and not {t.id for t in held} & {t.id for t in train}
    for item in tasks[::9]:
        assert item.metadata["correct"] == {m: r["correct"] for m, r in rows[item.id]["responses"].items()}
        for name, agent in agents.items():
            text = agent.recordings[item.id].text
            assert grade(task, item, text).correct == rows[item.id]["responses"][name]["correct"]
    item = next(t for t in tasks if t.id == "P_Combinatorics_1")
    assert task.score(item, "So there are 239 such strings of length 6.") == 1.0
    assert task.score(item, "So there are 238 such strings of length 6.") == 0.0
