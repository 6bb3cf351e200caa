"""``answers.selectors``: the ask permission read in one query."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User

from answers import selectors
from tests.helpers import query_plan

pytestmark = pytest.mark.django_db


def _fresh(user: User) -> User:
    """The user as a socket or request loads them: no permission read yet."""
    return User.objects.get(pk=user.pk)


def test_the_ask_permission_is_one_query_whether_held_directly_or_by_a_group(
    asker, no_ask_user, django_assert_num_queries
):
    """A socket checks the permission when it connects (and each page when it loads):
    one query where ModelBackend took two (the user's permissions, then their groups')."""
    may, may_not = _fresh(asker), _fresh(no_ask_user)
    with django_assert_num_queries(1):
        assert selectors.user_can_ask(user=may)
    with django_assert_num_queries(1):
        assert not selectors.user_can_ask(user=may_not)
    group = Group.objects.create(name="askers")
    group.permissions.add(Permission.objects.get(codename="ask_question"))
    no_ask_user.groups.add(group)
    by_group = _fresh(no_ask_user)
    with django_assert_num_queries(1):
        assert selectors.user_can_ask(user=by_group)
    group.permissions.clear()
    assert not selectors.user_can_ask(user=_fresh(no_ask_user))


def test_a_lazy_user_as_requests_and_sockets_carry_is_one_query_too(
    asker, no_ask_user, django_assert_num_queries
):
    """``request.user`` is a ``SimpleLazyObject`` and a socket's ``scope["user"]`` a
    Channels ``UserLazyObject``: the permission is still read in one query through them."""
    from channels.auth import UserLazyObject
    from django.utils.functional import SimpleLazyObject

    def socket_user(user: User) -> UserLazyObject:
        lazy = UserLazyObject()
        lazy._wrapped = user
        return lazy

    for wrap in (lambda user: SimpleLazyObject(lambda: user), socket_user):
        may, may_not = wrap(_fresh(asker)), wrap(_fresh(no_ask_user))
        with django_assert_num_queries(1):
            assert selectors.user_can_ask(user=may)
        with django_assert_num_queries(1):
            assert not selectors.user_can_ask(user=may_not)


def test_inactive_users_and_anonymous_ones_may_not_ask(asker, django_assert_num_queries):
    from django.contrib.auth.models import AnonymousUser

    asker.is_active = False
    with django_assert_num_queries(0):
        assert not selectors.user_can_ask(user=asker)
        assert not selectors.user_can_ask(user=AnonymousUser())


def test_a_backend_that_grants_by_itself_is_still_asked(no_ask_user, settings):
    """Rows decide only when ModelBackend alone grants; any other backend is asked."""
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "tests.test_pipeline.GrantsAsking",
    ]
    assert selectors.user_can_ask(user=_fresh(no_ask_user))
    settings.AUTHENTICATION_BACKENDS = ["tests.test_pipeline.DeniesAsking"]
    assert not selectors.user_can_ask(user=_fresh(no_ask_user))


def test_a_page_of_answers_is_read_newest_first_from_the_question_index(asker):
    """A page of an asker's answers does not sort every answer they ever had: the
    questions' (user, created_at) index gives them newest first (a first page took 224 ms
    at 100,000 answers on SQLite when the answers were sorted)."""
    plan = query_plan(selectors.answer_list_for_user(user=_fresh(asker))[:20])
    assert any("answers_question_user_time" in step for step in plan), plan
    # Only ties within one instant are sorted (by id), never the whole list.
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan


def test_a_page_of_conversations_is_read_from_the_owner_index(asker):
    """The history lists conversations by their stored last activity (migration 0018):
    a page does not aggregate every question the user asked (90 ms at 100,000 questions
    on SQLite before)."""
    plan = query_plan(selectors.conversation_list_for_user(user=_fresh(asker))[:25])
    assert any("answers_conversation_recent" in step for step in plan), plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan
