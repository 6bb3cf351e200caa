"""``tests.settings`` with the HTTP reranker at ``TEST_RERANK_URL``: for a live server
(tests/live.py) whose reranker is a test's ``tests.rerank_server.FakeReranker``."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

ANSWERS["RERANKER"] = "answers.rerankers.HttpReranker"  # noqa: F405
ANSWERS["RERANK_URL"] = os.environ["TEST_RERANK_URL"]  # noqa: F405
ANSWERS["RERANK_TIMEOUT"] = 60  # noqa: F405  (the test's server decides how long a request takes)
