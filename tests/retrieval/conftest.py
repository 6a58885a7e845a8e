"""The retrieval tests' corpus: the default synthetic encyclopedia, built once per test module."""

import pytest

from masrl.retrieval.synthetic import generate_corpus


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus()  # the defaults: about 2,900 pages, 3,000 + 500 questions
