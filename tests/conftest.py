from __future__ import annotations

import inspect

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.db import connections

from tests.corpus import load_corpus


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """The test database starts with the demo corpus plus a few restricted documents."""
    with django_db_blocker.unblock():
        load_corpus()


@pytest.fixture
async def _answer_streams_settle():  # type: ignore[no-untyped-def]
    """Generations outlive their sockets (answers.streams): each test's end before the
    next test, so none writes into a database being emptied."""
    yield
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    from answers.streams import answer_streams_wait

    await answer_streams_wait(timeout=30)
    # A Redis layer binds its locks to the loop it first ran on; each test has its own
    # loop, so each gets its own layer. (Not close_pools(): it waits out every blocking
    # receive, 5 s each; the old loop's connections go with the loop.)
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    # The connection of the thread sync_to_async runs ORM calls on: PostgreSQL cannot drop
    # the test database at the end while it is open.
    await sync_to_async(connections.close_all)()


def pytest_configure(config):  # type: ignore[no-untyped-def]
    from django.conf import settings

    if getattr(settings, "REDIS_URL", ""):
        from channels.security.websocket import WebsocketDenier

        # Channels' consumer that refuses a foreign Origin takes a Redis channel it never
        # uses; its blocked receive holds up the close of each test's event loop for the
        # 5 s of a Redis blocking pop. (Our own consumer takes none, see consumers.py.)
        WebsocketDenier.channel_layer_alias = "tests-denier-needs-no-layer"


def pytest_collection_modifyitems(items):  # type: ignore[no-untyped-def]
    # Only coroutine tests start generations in the test's own event loop (an async
    # fixture on a sync test would leave a loop running under Playwright's sync API).
    for item in items:
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_answer_streams_settle")


@pytest.fixture
def corpus(transactional_db):  # type: ignore[no-untyped-def]
    """For transactional tests, which empty the tables after each test."""
    load_corpus()


def _user(django_user_model, username: str, *, ask: bool = True, groups: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    if ask:
        user.user_permissions.add(Permission.objects.get(codename="ask_question"))
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


@pytest.fixture
def asker(django_user_model):  # type: ignore[no-untyped-def]
    return _user(django_user_model, "asker")


@pytest.fixture
def other_asker(django_user_model):  # type: ignore[no-untyped-def]
    return _user(django_user_model, "other")


@pytest.fixture
def member(django_user_model):  # type: ignore[no-untyped-def]
    """May ask, and belongs to the group that sees the restricted documents."""
    return _user(django_user_model, "member", groups=("vault",))


@pytest.fixture
def no_ask_user(django_user_model):  # type: ignore[no-untyped-def]
    return _user(django_user_model, "reader", ask=False)


@pytest.fixture
def scripted(settings):  # type: ignore[no-untyped-def]
    """Use the scripted provider; set ``ScriptedProvider.script`` in the test."""
    from tests.providers import ScriptedProvider

    ScriptedProvider.script = ["Nothing to say."]
    ScriptedProvider.prompts = []
    ScriptedProvider.delay = 0.0
    settings.ANSWERS = {**settings.ANSWERS, "PROVIDER": "tests.providers.ScriptedProvider"}
    return ScriptedProvider


@pytest.fixture
def call(capsys):  # type: ignore[no-untyped-def]
    def run(*args: str, **kwargs):  # type: ignore[no-untyped-def]
        call_command(*args, **kwargs)
        return capsys.readouterr()

    return run


@pytest.fixture(scope="session")
def _daphne_live_server_process(django_db_setup):  # type: ignore[no-untyped-def]
    """One daphne process (tests/live.py) for the session, on the test database."""
    from django.db import connections

    from tests.live import run_live_server

    with run_live_server(connections["default"].settings_dict) as server:
        yield server


@pytest.fixture
def daphne_live_server(_daphne_live_server_process, corpus):  # type: ignore[no-untyped-def]
    """The real app under daphne (a ``tests.live.LiveServer``: ``.url``, ``.ws_url``).

    Transactional (via ``corpus``): create users in the test, they are committed. What
    the server logged during the test is printed at teardown (shown if the test fails).
    """
    yield from _for_one_test(_daphne_live_server_process, "live server log")


@pytest.fixture(scope="session")
def _slow_live_server_process(django_db_setup):  # type: ignore[no-untyped-def]
    from tests.live import run_live_server

    env = {"ANSWERS_EXTRACTIVE_DELAY": "0.1"}
    with run_live_server(connections["default"].settings_dict, env=env) as server:
        yield server


@pytest.fixture
def slow_live_server(_slow_live_server_process, corpus):  # type: ignore[no-untyped-def]
    """Like ``daphne_live_server``, with answers slow enough (several seconds) to drop,
    reload or open a second tab while one is still being written."""
    yield from _for_one_test(_slow_live_server_process, "slow live server log")


def _for_one_test(server, label: str):  # type: ignore[no-untyped-def]
    """A live server's fixture body: the session's ``server``, checked alive; what it
    logged during the test is printed under ``label`` at teardown."""
    server.check_alive()
    start = server.log_size()
    yield server
    print(f"--- {label} ({server.url}) ---\n{server.log_since(start)}")


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """Debian's chromium for Playwright, installed with apt-get if it is missing."""
    from tests.live import ensure_chromium

    try:
        return ensure_chromium()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


# --- Browser tests (helpers: tests/browser.py) --------------------------------------------


@pytest.fixture(scope="module")
def browser(chromium_executable: str):  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM_ARGS

    # Playwright's sync API keeps its event loop marked as running in this thread, so
    # Django's ORM (users, the transactional flush) would refuse to run; nothing of ours
    # runs inside that loop, so the check is safely off while the browser is up.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(
            executable_path=chromium_executable, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser, daphne_live_server):  # type: ignore[no-untyped-def]
    from tests.browser import new_page

    page = new_page(browser, daphne_live_server.url)
    yield page
    page.context.close()  # before the database is emptied: no socket may outlive the test


@pytest.fixture
def slow_page(browser, slow_live_server):  # type: ignore[no-untyped-def]
    from tests.browser import RECORD_SOCKETS, new_page

    page = new_page(browser, slow_live_server.url, init_script=RECORD_SOCKETS)
    yield page
    page.context.close()


@pytest.fixture
def answer_group_sends(monkeypatch):  # type: ignore[no-untyped-def]
    """The events the generating process sends to answers' groups on the channel layer,
    and how many messages carried them."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    sent: list[dict] = []
    group_send = layer.group_send

    async def recording(group, message):  # type: ignore[no-untyped-def]
        if group.startswith("answers.answer."):
            sent.append(message)
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", recording)
    return sent
