"""A small synthetic encyclopedia's settings, for the retrieval tests that need a corpus quickly."""

from masrl.retrieval.corpus import SyntheticConfig

SMALL = SyntheticConfig(seed=7, people=300, cities=60, countries=8, rivers=15, universities=15, films=60, books=60,
                        songs=50, bands=20, companies=40, train_questions=300, eval_questions=60)  # fmt: skip
