from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command

from tests.corpus import load_corpus


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """The test database starts with the demo corpus plus a few restricted documents."""
    with django_db_blocker.unblock():
        load_corpus()


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
