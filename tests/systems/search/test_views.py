"""The search pipeline's section of the run page (masrl/systems/search/views.py): F1 and EM at each saved
evaluation, with intervals, labelled with the run's sampler; nothing for a run that saved none."""

from __future__ import annotations

from masrl.evaluate import ItemScores, SystemEval
from masrl.run.files import RunDir
from masrl.systems.search.views import search_views


def test_f1_and_em_by_evaluation_labelled_with_the_sampler(tmp_path):
    assert search_views(tmp_path) == []
    run = RunDir(tmp_path)
    run.config.write_text("sampler:\n  rule: round_robin\n")
    for step, f1 in ((0, (0.0, 0.0, 1.0, 1.0)), (4, (1.0, 1.0, 1.0, 1.0))):
        scores = ItemScores("policy", ("a", "b", "c", "d"), {"f1": f1, "em": (0.0, 0.0, 0.0, 1.0)})
        run.write_eval(step, SystemEval({}, "", per_item=(scores,)))
    (view,) = search_views(tmp_path)
    assert view.title == "F1 by evaluation, sampler round_robin"
    (fig,) = view.figures
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [("f1", [0, 4], [0.5, 1.0]), ("em", [0, 4], [0.25, 0.25])]
    (table,) = view.tables
    assert [row[:2] for row in table.rows] == [("0", "f1"), ("4", "f1"), ("0", "em"), ("4", "em")]
