from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from answers import pipeline, services
from answers.models import Answer, ApiToken, Chunk, Document, Feedback, RetrievedSource
from answers.registry import get_search_backend
from tests.corpus import ingest_text
from tests.helpers import ask, assert_chunk_counts_stored, query_plan, staff_reviewer

pytestmark = pytest.mark.django_db


CHANGELIST = "admin:answers_answer_changelist"


def _answer(user, question: str) -> Answer:  # type: ignore[no-untyped-def]
    done = ask(user=user, question=question)
    assert isinstance(done, pipeline.DoneEvent)
    return Answer.objects.get(pk=done.answer.answer_id)


def _change_url(answer: Answer) -> str:
    return reverse("admin:answers_answer_change", args=[answer.pk])


def _result_rows(html: str) -> list[str]:
    table = html.split('id="result_list"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr>.*?</tr>", table.split("<tbody>", 1)[1], re.S)


def _review_post(answer: Answer, html: str, **fields: str) -> dict[str, str]:
    """The change form's POST data, read from its rendered inline management form."""
    prefix = re.search(r'name="([\w-]+)-TOTAL_FORMS"', html)
    assert prefix is not None, "the Feedback inline has a management form"
    p = prefix.group(1)
    initial = answer.feedback.count()
    data = {
        f"{p}-TOTAL_FORMS": str(initial),
        f"{p}-INITIAL_FORMS": str(initial),
        f"{p}-MIN_NUM_FORMS": "0",
        f"{p}-MAX_NUM_FORMS": "1000",
        "review_note": "",
    }
    for index, feedback in enumerate(answer.feedback.order_by("-created_at")):
        data[f"{p}-{index}-id"] = str(feedback.pk)
        data[f"{p}-{index}-answer"] = str(answer.pk)
    data.update(fields)
    return data


# ----------------------------------------------------------------------------- answers


def test_answer_changelist_shows_columns_counts_and_feedback(admin_client, asker, other_asker):  # type: ignore[no-untyped-def]
    answer = _answer(asker, "What is a lambda expression?")
    services.feedback_record(answer=answer, user=asker, rating="up", comment="")
    services.feedback_record(answer=answer, user=other_asker, rating="down", comment="meh")
    retrieved = RetrievedSource.objects.filter(question=answer.question).count()
    cited = (
        RetrievedSource.objects.filter(question=answer.question, cited=True)
        .values("document")
        .distinct()
        .count()
    )
    assert retrieved > 0 and cited > 0

    response = admin_client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    html = response.content.decode()
    for header in ("Question", "User", "Status", "Retrieved", "Cited", "Feedback"):
        assert f">{header}</a>" in html or f">{header}</span>" in html, header
    for timing in ("column-retrieval_ms", "column-first_token_ms", "column-total_ms"):
        assert timing in html
    (row,) = _result_rows(html)
    assert "What is a lambda expression?" in row
    assert "asker" in row
    assert "Complete" in row
    assert f'class="field-retrieved">{retrieved}<' in row
    assert f'class="field-cited">{cited}<' in row
    assert "+1 / -1" in row
    assert f'class="field-total_ms">{answer.total_ms}<' in row


def test_answer_changelist_filters_by_status(admin_client, asker, scripted):  # type: ignore[no-untyped-def]
    _answer(asker, "What is a lambda expression?")
    _answer(asker, "Who won the football world cup?")
    failed = _answer(asker, "How does the yield statement behave?")
    Answer.objects.filter(pk=failed.pk).update(status=Answer.Status.FAILED)

    response = admin_client.get(reverse(CHANGELIST), {"status__exact": "failed"})
    rows = _result_rows(response.content.decode())
    assert len(rows) == 1
    assert "yield statement" in rows[0]

    response = admin_client.get(reverse(CHANGELIST), {"status__exact": "no_answer"})
    rows = _result_rows(response.content.decode())
    assert len(rows) == 1
    assert "football" in rows[0]


@pytest.mark.parametrize(
    "query",
    [
        "created_at__year=9999",  # the end of the year is in 10000
        "created_at__year=9999&created_at__month=12",
        "created_at__year=9999&created_at__month=12&created_at__day=31",
        "created_at__year=99999999999",
        "status__exact=%00",  # PostgreSQL refuses a NUL in a text value
        "provider=%00",
        "q=%00",
    ],
)
def test_bad_filter_values_get_the_changelists_error_page(admin_client, query):  # type: ignore[no-untyped-def]
    response = admin_client.get(f"/admin/answers/answer/?{query}")
    assert response.status_code == 302 and response["Location"].endswith("?e=1")
    assert admin_client.get(response["Location"]).status_code == 200


def test_bad_filter_values_on_documents_and_tokens_too(admin_client):  # type: ignore[no-untyped-def]
    for url in ("/admin/answers/document/?access__exact=%00", "/admin/answers/apitoken/?q=%00"):
        response = admin_client.get(url)
        assert response.status_code == 302 and response["Location"].endswith("?e=1"), url


HUGE = "9" * 30  # past any 64-bit id: SQLite cannot even bind it
MANY_WORDS = "+".join(["word"] * 1200)  # SQLite: "Expression tree is too large"


@pytest.mark.parametrize(
    "url",
    [
        f"/admin/answers/answer/?question={HUGE}",
        f"/admin/answers/answer/?reviewed_by={HUGE}",
        f"/admin/answers/answer/?id__in=1,{HUGE}",
        f"/admin/answers/document/?groups={HUGE}",
    ],
)
def test_an_id_past_64_bits_finds_nothing_or_says_why(admin_client, url):  # type: ignore[no-untyped-def]
    """PostgreSQL compares it and matches nothing; SQLite cannot bind it: the error page
    with its reason. Never a 500."""
    response = admin_client.get(url, follow=True)
    assert response.status_code == 200, url
    html = response.content.decode()
    if response.redirect_chain:
        assert response.redirect_chain[-1][0].endswith("?e=1")
        assert "cannot be filtered or searched that way (a number out of range)" in html
    else:
        assert re.search(r"0 (answers|documents)", html), url


@pytest.mark.parametrize(
    "url",
    [
        "/admin/answers/answer/?final_text__regex=(",  # the database cannot compile it
        "/admin/answers/answer/?final_text__iregex=(a%2B)%2B$",  # nor run this one for long
        f"/admin/answers/answer/?q={MANY_WORDS}",
        f"/admin/answers/document/?q={MANY_WORDS}",
    ],
)
def test_bad_ids_patterns_and_searches_get_the_error_page_with_a_message(admin_client, url):  # type: ignore[no-untyped-def]
    """Never a 500: the list in full, saying why (not the admin's bare "?e=1")."""
    response = admin_client.get(url)
    assert response.status_code == 302 and response["Location"].endswith("?e=1"), url
    page = admin_client.get(response["Location"])
    assert page.status_code == 200
    shown = [str(m) for m in page.context["messages"]]
    assert any("cannot be filtered or searched that way" in m for m in shown), shown


def test_a_bad_filter_value_says_so(admin_client):  # type: ignore[no-untyped-def]
    response = admin_client.get("/admin/answers/answer/?created_at__gte=notadate", follow=True)
    assert response.redirect_chain[-1][0].endswith("?e=1")
    assert "cannot be filtered or searched that way" in response.content.decode()


@pytest.mark.parametrize("term", ["%00", MANY_WORDS])
def test_autocomplete_refuses_a_search_it_cannot_run(admin_client, term):  # type: ignore[no-untyped-def]
    """The admin's autocomplete (any related field, e.g. a retrieval record's document)
    searches the same querysets: a NUL (PostgreSQL refuses it) or a search of a thousand
    words (SQLite cannot nest it) is a 400, not a 500."""
    for model, field in (("retrievedsource", "document"), ("feedback", "answer")):
        url = (
            f"/admin/autocomplete/?app_label=answers&model_name={model}"
            f"&field_name={field}&term={term}"
        )
        assert admin_client.get(url).status_code == 400, url


def test_autocomplete_pages_through_documents_in_title_order_each_once(admin_client):  # type: ignore[no-untyped-def]
    """The admin's querysets count chunks (a GROUP BY, which drops the model's ordering):
    the autocomplete paged them unordered, so a page could repeat or skip a document."""
    source = {"app_label": "answers", "model_name": "retrievedsource", "field_name": "document"}
    texts: list[str] = []
    for page in range(1, 100):
        body = admin_client.get("/admin/autocomplete/", {**source, "page": page}).json()
        texts += [result["text"] for result in body["results"]]
        if not body["pagination"]["more"]:
            break
    expected = list(Document.objects.order_by("title", "id").values_list("title", flat=True))
    assert len(expected) > 20  # more than a page
    assert texts == expected


@pytest.mark.parametrize("selected", ["abc", "\x00", HUGE, "-1", "1.5"])
@pytest.mark.parametrize(
    ("changelist", "action"),
    [
        ("admin:answers_document_changelist", "delete_selected"),
        ("admin:answers_apitoken_changelist", "revoke_tokens"),
        ("admin:answers_answer_changelist", "delete_selected"),
    ],
)
def test_an_action_on_ids_that_are_not_ids_says_so(admin_client, changelist, action, selected):  # type: ignore[no-untyped-def]
    """A tampered selection (not a number, or past 64 bits) was a 500; now the list again,
    with a message, and nothing done."""
    documents = Document.objects.count()
    response = admin_client.post(
        reverse(changelist), {"action": action, "index": "0", "_selected_action": [selected]}
    )
    assert response.status_code == 302 and response["Location"] == reverse(changelist)
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("not an id" in m for m in shown), shown
    assert Document.objects.count() == documents


def test_a_document_form_with_a_group_id_that_is_no_id_shows_the_error(admin_client):  # type: ignore[no-untyped-def]
    document = Document.objects.get(source_key="python-docs:lambda")
    url = reverse("admin:answers_document_change", args=[document.pk])
    for value in (HUGE, "abc"):
        form = _document_form(document, access="groups", groups=[value])
        response = admin_client.post(url, form)
        assert response.status_code == 200, value  # the form again, with its error
        assert "is not a valid value" in response.content.decode(), value
    assert not document.groups.exists()


def test_answer_changelist_search_by_question_text(admin_client, asker, scripted):  # type: ignore[no-untyped-def]
    _answer(asker, "What is a lambda expression?")
    _answer(asker, "How does the yield statement behave?")

    response = admin_client.get(reverse(CHANGELIST), {"q": "lambda"})
    rows = _result_rows(response.content.decode())
    assert len(rows) == 1
    assert "lambda expression" in rows[0]


def test_answer_changelist_query_count_does_not_grow_with_answers(
    admin_client, asker, other_asker, scripted
):  # type: ignore[no-untyped-def]
    def changelist_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse(CHANGELIST))
        assert response.status_code == 200
        return len(captured.captured_queries)

    scripted.script = ["Lambdas are small [1]."]
    for user in (asker, other_asker):
        answer = _answer(user, "What is a lambda expression?")
        services.feedback_record(answer=answer, user=user, rating="up", comment="")
    two = changelist_queries()
    for index in range(4):
        user = asker if index % 2 else other_asker
        answer = _answer(user, f"What is a lambda expression? ({index})")
        services.feedback_record(answer=answer, user=user, rating="down", comment="")
    assert Answer.objects.count() == 6
    assert changelist_queries() == two


def test_answer_changelist_counts_filters_and_dates_read_the_answers_alone(
    admin_client, asker, other_asker, scripted
):  # type: ignore[no-untyped-def]
    """Every query of the list but its page reads the answers table alone: its two counts,
    the provider filter's choices and the date hierarchy were each the whole history
    joined to every answer's candidates (40 a question) and feedback, grouped per answer,
    on every view of the list."""
    scripted.script = ["Lambdas are small [1]."]
    answer = _answer(asker, "What is a lambda expression?")
    services.feedback_record(answer=answer, user=other_asker, rating="up", comment="")

    queries = [
        sql for sql in _page_queries(admin_client, reverse(CHANGELIST)) if "answers_answer" in sql
    ]
    # All but the page itself (the one query that reads the questions' texts).
    whole_list = [sql for sql in queries if '"answers_question"."text"' not in sql]
    assert len(whole_list) == len(queries) - 1 >= 3, queries  # count, dates, provider filter
    for sql in whole_list:
        assert "answers_retrievedsource" not in sql and "answers_feedback" not in sql, sql
        assert "GROUP BY" not in sql, sql


def test_the_provider_filter_lists_each_provider_from_an_index_and_filters_by_it(
    admin_client, asker, scripted
):  # type: ignore[no-untyped-def]
    """The provider filter's choices were every answer's provider, read and made distinct
    on each view of the list: they are found by jumping through an index, a step a
    provider, however many answers each has."""
    from answers import selectors

    for question in ("What is a lambda expression?", "What does the global statement do?"):
        _answer(asker, question)
    Answer.objects.filter(pk=Answer.objects.first().pk).update(provider="other:model")
    providers = sorted(set(Answer.objects.values_list("provider", flat=True)))
    assert len(providers) == 2
    reviewer = staff_reviewer("pager", review_all=True)
    assert selectors.answer_providers_for_review(reviewer=reviewer) == providers

    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    for provider in providers:
        assert f"?provider={provider.replace(':', '%3A')}" in html, provider
    rows = _result_rows(
        admin_client.get(reverse(CHANGELIST), {"provider": "other:model"}).content.decode()
    )
    assert len(rows) == 1

    sql, params = selectors.answer_providers_query()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = [str(row[-1]) for row in cursor.fetchall()]
            assert not any(step.startswith("SCAN answers_answer") for step in plan), plan
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = [str(row[0]) for row in cursor.fetchall()]
            assert not any("Seq Scan" in step for step in plan), plan
    assert any("answers_answer_provider" in step for step in plan), plan


@pytest.mark.parametrize("review_all", [True, False])
def test_a_page_of_the_answer_changelist_is_read_newest_first_from_an_index(review_all):  # type: ignore[no-untyped-def]
    """The list's page comes from the (created_at, id) index in its order, its counts
    worked out for its own rows: not every answer aggregated and sorted for each page."""
    from django.db import connection

    from answers import selectors

    if not review_all and connection.vendor == "postgresql":
        # A reviewer limited to some groups adds two EXISTS tests per answer (withheld,
        # redacted passages); on the test database's empty tables PostgreSQL's planner
        # then prefers a nested loop to the index; with real data it is not yet measured.
        pytest.skip("PostgreSQL plans a group-limited reviewer's list on cost, not shown here")
    reviewer = staff_reviewer("pager", review_all=review_all)
    plan = query_plan(selectors.answer_admin_queryset(reviewer=reviewer)[:100])
    assert any("answers_answer_recent" in step for step in plan), plan
    assert not any("TEMP B-TREE FOR ORDER BY" in step for step in plan), plan
    assert not any(step.lstrip(" ->").startswith("Sort") for step in plan), plan


@pytest.fixture
def renumbered_answer(asker, other_asker, scripted):  # type: ignore[no-untyped-def]
    """A complete answer whose citations were renumbered ([2] came first), with feedback."""
    scripted.script = ["Lambdas are small [2] anonymous functions [1]."]
    answer = _answer(asker, "What is a lambda expression?")
    services.feedback_record(answer=answer, user=other_asker, rating="down", comment="Too terse")
    answer.refresh_from_db()
    assert answer.raw_text == "Lambdas are small [2] anonymous functions [1]."
    assert answer.final_text == "Lambdas are small [1] anonymous functions [2]."
    return answer


def test_answer_change_page_shows_raw_beside_final_and_feedback(admin_client, renumbered_answer):  # type: ignore[no-untyped-def]
    response = admin_client.get(_change_url(renumbered_answer))
    assert response.status_code == 200
    html = response.content.decode()
    grid = re.search(
        r'<div class="answers-side-by-side">'
        r'<pre data-text="raw">(.*?)</pre>'
        r'<pre data-text="final">(.*?)</pre></div>',
        html,
        re.S,
    )
    assert grid is not None, "raw and final text side by side"
    assert grid.groups() == (renumbered_answer.raw_text, renumbered_answer.final_text)
    inline = html.split('id="feedback-group"', 1)[1]
    assert "other" in inline
    assert "Not helpful" in inline
    assert "Too terse" in inline


def test_answer_change_page_lists_every_retrieved_source_with_its_fate(
    admin_client, renumbered_answer
):  # type: ignore[no-untyped-def]
    sources = list(
        RetrievedSource.objects.filter(question=renumbered_answer.question)
        .select_related("document")
        .order_by("rank")
    )
    assert any(s.final_number for s in sources)
    html = admin_client.get(_change_url(renumbered_answer)).content.decode()
    assert "<th>Final [n]</th>" in html, "the sources table renders"
    table = html.split("<th>Final [n]</th>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>.*?</tr>", table, re.S)
    assert len(rows) == len(sources)
    for source, row in zip(sources, rows, strict=True):
        cells = re.findall(r"<td>(.*?)</td>", row, re.S)
        assert cells[0] == str(source.rank)
        assert f">{source.document.title}</a>" in cells[1]
        assert reverse("admin:answers_document_change", args=[source.document_id]) in cells[1]
        assert cells[3] == f"{source.score:.3f}"
        assert cells[5] == (str(source.prompt_number) if source.prompt_number else "—")
        assert cells[6] == (source.get_dropped_reason_display() or "numbered")
        assert cells[7] == (str(source.final_number) if source.final_number else "—")


XSS_QUESTION = "What is a quokkaberry? <script>alert(3)</script><img src=x onerror=alert(1)>"
XSS_TITLE = 'Quokkaberry notes"><script>alert(2)</script>'


@pytest.fixture
def xss_answer(asker, scripted):  # type: ignore[no-untyped-def]
    """An answer whose question, raw/final text and cited document title carry markup."""
    services.document_ingest(
        source_key="test:xss",
        title=XSS_TITLE,
        body="The quokkaberry is a fictional fruit. Quokkaberry jam is made from quokkaberries.",
        chunk_size=1200,
    )
    scripted.script = ["<script>alert(1)</script> [1] <img src=x onerror=alert(1)>"]
    answer = _answer(asker, XSS_QUESTION)
    assert "<script>alert(1)</script>" in answer.raw_text
    assert RetrievedSource.objects.filter(
        question=answer.question, document__source_key="test:xss", final_number=1
    ).exists()
    return answer


def _page_queries(client, url: str) -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return [query["sql"] for query in captured.captured_queries]


def test_answer_change_page_queries_do_not_grow_with_sources_or_feedback(
    admin_client, asker, other_asker, scripted, django_user_model
):  # type: ignore[no-untyped-def]
    """At millions of answers a reviewer's page is still a fixed number of queries: not
    one per cited passage or per feedback row, and no document's whole body read to show
    its title (a body can be megabytes; a page lists 40 candidates)."""
    scripted.script = ["Lambdas are small [1]."]
    one = _answer(asker, "What is a lambda expression?")
    services.feedback_record(answer=one, user=other_asker, rating="up", comment="")
    scripted.script = ["Lambdas are small [1] and [2] and [3] and [4] and [5] and [6]."]
    many = _answer(
        asker, "What is a lambda expression, a function definition, a generator and a class?"
    )
    for index in range(5):
        rater = django_user_model.objects.create_user(username=f"rater{index}", password="pw")
        services.feedback_record(answer=many, user=rater, rating="down", comment="no")
    cited = RetrievedSource.objects.filter(question=many.question, final_number__isnull=False)
    assert cited.count() >= 6 and Feedback.objects.filter(answer=many).count() == 5

    _page_queries(admin_client, _change_url(one))  # Django caches its content types
    few_queries = _page_queries(admin_client, _change_url(one))
    many_queries = _page_queries(admin_client, _change_url(many))
    assert len(many_queries) == len(few_queries), "\n".join(many_queries)
    assert not any('"answers_document"."body"' in sql for sql in many_queries)


def test_admin_escapes_question_and_model_text(admin_client, xss_answer):  # type: ignore[no-untyped-def]
    for url in (_change_url(xss_answer), reverse(CHANGELIST)):
        html = admin_client.get(url).content.decode()
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;alert(3)&lt;/script&gt;" in html  # the question
    html = admin_client.get(_change_url(xss_answer)).content.decode()
    raw = re.search(r'data-text="raw">(.*?)</pre>', html, re.S)
    final = re.search(r'data-text="final">(.*?)</pre>', html, re.S)
    assert raw is not None and final is not None
    for shown in (raw.group(1), final.group(1)):
        assert shown.startswith("&lt;script&gt;alert(1)&lt;/script&gt; [1]")
        assert "&lt;img src=x onerror=alert(1)&gt;" in shown


def test_admin_escapes_document_titles_in_the_sources_table(admin_client, xss_answer):  # type: ignore[no-untyped-def]
    html = admin_client.get(_change_url(xss_answer)).content.decode()
    assert "<script>alert" not in html
    # The title is shown, escaped, in the sources table (it is in no other field).
    assert "Quokkaberry notes&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;</a>" in html


def test_answers_cannot_be_added(admin_client):  # type: ignore[no-untyped-def]
    response = admin_client.get(reverse("admin:answers_answer_add"))
    assert response.status_code == 403
    response = admin_client.post(reverse("admin:answers_answer_add"), {"raw_text": "x"})
    assert response.status_code == 403
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert reverse("admin:answers_answer_add") not in html


def test_marking_reviewed_stores_reviewer_and_leaves_texts_alone(
    admin_client, admin_user, asker, other_asker, scripted
):  # type: ignore[no-untyped-def]
    scripted.script = ["Lambdas are small [1]."]
    answer = _answer(asker, "What is a lambda expression?")
    services.feedback_record(answer=answer, user=other_asker, rating="up", comment="ok")
    before = Answer.objects.get(pk=answer.pk)
    url = _change_url(answer)
    html = admin_client.get(url).content.decode()
    assert 'name="reviewed"' in html and 'name="review_note"' in html
    assert 'name="raw_text"' not in html and 'name="final_text"' not in html

    data = _review_post(
        answer,
        html,
        reviewed="on",
        review_note="Checked against the reference.",
        raw_text="tampered raw",
        final_text="tampered final",
        status="failed",
    )
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]

    after = Answer.objects.get(pk=answer.pk)
    assert after.reviewed is True
    assert after.review_note == "Checked against the reference."
    assert after.reviewed_by == admin_user
    assert after.reviewed_at is not None
    assert (after.raw_text, after.final_text, after.status) == (
        before.raw_text,
        before.final_text,
        before.status,
    )
    assert Feedback.objects.get(answer=answer).comment == "ok"

    # Un-marking clears who reviewed and when.
    response = admin_client.post(url, _review_post(answer, html, review_note="reopened"))
    assert response.status_code == 302
    after = Answer.objects.get(pk=answer.pk)
    assert (after.reviewed, after.reviewed_by, after.reviewed_at) == (False, None, None)
    assert after.review_note == "reopened"


# --------------------------------------------------------------------------- documents


def test_document_changelist_and_change_page_render(admin_client):  # type: ignore[no-untyped-def]
    document = Document.objects.get(source_key="python-docs:lambda")
    html = admin_client.get(reverse("admin:answers_document_changelist")).content.decode()
    assert 'id="result_list"' in html
    assert "Project Nightjar launch plan" in html
    html = admin_client.get(
        reverse("admin:answers_document_changelist"), {"q": "lambda"}
    ).content.decode()
    row = next(r for r in _result_rows(html) if ">Lambdas<" in r)
    assert f'class="field-chunk_count">{document.chunks.count()}<' in row

    response = admin_client.get(reverse("admin:answers_document_change", args=[document.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="body"' in html and 'name="title"' in html
    assert document.content_hash in html


def test_document_changelist_reads_no_chunks_and_no_bodies(admin_client):  # type: ignore[no-untyped-def]
    """The list shows each document's stored chunk count: it counted them by joining every
    chunk of the corpus to the documents and grouping (twice more for its counts), on
    every view, and it read each listed document's whole body to show its title."""
    for sort in ("", "3", "-3"):  # by title; by chunks (after the checkbox), both ways
        params = {"o": sort} if sort else {}
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse("admin:answers_document_changelist"), params)
        assert response.status_code == 200
        queries = [query["sql"] for query in captured.captured_queries]
        assert not any("answers_chunk" in sql for sql in queries), queries
        assert not any('"answers_document"."body"' in sql for sql in queries), queries
        counts = [
            int(n)
            for n in re.findall(r'class="field-chunk_count">(\d+)<', response.content.decode())
        ]
        assert counts, "a chunk count a row"
        if sort:
            assert counts == sorted(counts, reverse=sort.startswith("-")), counts
    document = Document.objects.get(source_key="python-docs:lambda")
    html = admin_client.get(reverse("admin:answers_document_changelist"), {"q": "Lambda"})
    assert f'class="field-chunk_count">{document.chunks.count()}<' in html.content.decode()


def test_a_page_of_the_document_changelist_is_read_in_title_order_from_an_index():  # type: ignore[no-untyped-def]
    """The list (and the autocomplete) pages documents by title from an index: each page
    sorted every document. (A reviewer limited to some groups still has the documents
    they may see found first, then sorted: both databases prefer the access index.)"""
    from answers import selectors

    reviewer = staff_reviewer("pager", review_all=True)
    plan = query_plan(selectors.document_admin_queryset(reviewer=reviewer)[:100])
    assert any("answers_document_title" in step for step in plan), plan
    assert not any("TEMP B-TREE FOR ORDER BY" in step for step in plan), plan
    assert not any(step.lstrip(" ->").startswith("Sort") for step in plan), plan


def test_editing_a_document_body_rechunks_it_and_is_searchable(admin_client):  # type: ignore[no-untyped-def]
    document = Document.objects.get(source_key="python-docs:lambda")
    old_chunks = list(document.chunks.values_list("text", flat=True))
    old_hash = document.content_hash
    url = reverse("admin:answers_document_change", args=[document.pk])
    body = "Lambdas are explained by the flibbertigibbet walrus.\n\n" + "Padding words. " * 200
    response = admin_client.post(
        url,
        {
            "title": document.title,
            "url": document.url,
            "source_key": document.source_key,
            "access": document.access,
            "body": body,
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]

    document.refresh_from_db()
    assert document.body == body  # as typed: stripping changed unchanged bodies
    assert document.content_hash != old_hash
    new_chunks = list(Chunk.objects.filter(document=document).values_list("text", flat=True))
    assert new_chunks != old_chunks
    assert new_chunks[0].startswith("Lambdas are explained by the flibbertigibbet walrus.")
    assert len(new_chunks) > 1
    assert "".join(new_chunks).replace(" ", "") == body.strip().replace(" ", "").replace("\n", "")
    assert_chunk_counts_stored()

    hits = get_search_backend().search("flibbertigibbet walrus", limit=5)
    assert hits
    assert Chunk.objects.get(pk=hits[0].chunk_id).document_id == document.pk
    # The old text is gone from the index: its words no longer find this document.
    assert "unnamed object behaves" in old_chunks[0]
    stale = get_search_backend().search("unnamed object behaves", limit=40)
    assert all(Chunk.objects.filter(pk=h.chunk_id).exists() for h in stale)
    assert document.pk not in set(
        Chunk.objects.filter(pk__in=[h.chunk_id for h in stale]).values_list(
            "document_id", flat=True
        )
    )


def test_adding_a_document_chunks_it_and_makes_it_searchable(admin_client):  # type: ignore[no-untyped-def]
    response = admin_client.post(
        reverse("admin:answers_document_add"),
        {
            "title": "Snarkhunting",
            "url": "",
            "source_key": "admin:snark",
            "access": Document.Access.EVERYONE,
            "body": "The snark is hunted with thimbles and care.",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    document = Document.objects.get(source_key="admin:snark")
    assert len(document.content_hash) == 64
    assert list(document.chunks.values_list("text", flat=True)) == [
        "The snark is hunted with thimbles and care."
    ]
    assert_chunk_counts_stored()
    hits = get_search_backend().search("snark thimbles", limit=5)
    assert hits and Chunk.objects.get(pk=hits[0].chunk_id).document_id == document.pk


def _document_form(document: Document, **fields: object) -> dict[str, object]:
    data: dict[str, object] = {
        "title": document.title,
        "url": document.url,
        "source_key": document.source_key,
        "access": document.access,
        "groups": [g.pk for g in document.groups.all()],
        "body": document.body,
    }
    data.update(fields)
    return data


def test_groups_chosen_while_open_to_everyone_are_refused_not_ignored(admin_client):  # type: ignore[no-untyped-def]
    """Groups restrict only with "Members of the chosen groups": choosing a group and
    leaving access at "Everyone" used to save, and the document stayed open to everyone."""
    from django.contrib.auth.models import Group

    document = Document.objects.get(source_key="python-docs:lambda")
    vault = Group.objects.get_or_create(name="vault")[0]
    url = reverse("admin:answers_document_change", args=[document.pk])
    form = _document_form(document, title="Lambdas, restricted?", groups=[vault.pk])
    response = admin_client.post(url, form)
    assert response.status_code == 200  # the form again, with what was typed and an error
    html = response.content.decode()
    assert "Members of the chosen groups" in html and "restrict nothing" in html
    assert 'value="Lambdas, restricted?"' in html
    document.refresh_from_db()
    assert document.title != "Lambdas, restricted?" and not document.groups.exists()

    # Saying so restricts it: an outsider no longer lists it.
    form["access"] = Document.Access.GROUPS
    assert admin_client.post(url, form).status_code == 302
    document.refresh_from_db()
    assert document.access == Document.Access.GROUPS
    assert list(document.groups.all()) == [vault]


def test_restricting_a_document_in_the_admin_leaves_its_text_and_chunks_alone(admin_client):  # type: ignore[no-untyped-def]
    """A browser sends a textarea back with CRLF line endings, and the form stripped the
    trailing newline every ingested body has: each save of an unchanged document (to
    restrict it, rename it) rewrote its body and hash and replaced its chunks, which
    unlinked them from every answer's retrieval records."""
    from django.contrib.auth.models import Group

    document = Document.objects.get(source_key="python-docs:lambda")
    assert document.body.endswith("\n") and "\n" in document.body.strip()  # not vacuous
    body, digest = document.body, document.content_hash
    chunk_ids = list(document.chunks.values_list("pk", flat=True))
    vault = Group.objects.get_or_create(name="vault")[0]
    as_sent = body.replace("\n", "\r\n")
    form = _document_form(
        document, title="Lambdas (vault)", access="groups", groups=[vault.pk], body=as_sent
    )
    url = reverse("admin:answers_document_change", args=[document.pk])
    assert admin_client.post(url, form).status_code == 302
    document.refresh_from_db()
    assert (document.title, document.access) == ("Lambdas (vault)", Document.Access.GROUPS)
    assert (document.body, document.content_hash) == (body, digest)
    assert list(document.chunks.values_list("pk", flat=True)) == chunk_ids
    # Kept as typed, a body of blanks is still no body.
    response = admin_client.post(url, {**form, "body": "  \r\n  "})
    assert response.status_code == 200 and "This field is required." in response.content.decode()
    assert Document.objects.get(pk=document.pk).body == body


def test_document_save_sets_the_groups_with_the_access(db):  # type: ignore[no-untyped-def]
    """The admin's one write of a document's access (its fields and its groups together)."""
    from django.contrib.auth.models import Group

    vault = Group.objects.get_or_create(name="vault")[0]
    document = Document.objects.get(source_key="python-docs:lambda")
    with pytest.raises(services.DocumentAccessInvalid):
        services.document_save(document=document, chunk_size=1200, groups=[vault])
    assert not Document.objects.get(pk=document.pk).groups.exists()
    document.access = Document.Access.GROUPS
    services.document_save(document=document, chunk_size=1200, groups=[vault])
    stored = Document.objects.get(pk=document.pk)
    assert stored.access == Document.Access.GROUPS and list(stored.groups.all()) == [vault]
    outsider = staff_reviewer("outsider2")
    from answers import selectors

    assert not selectors.document_list_visible(user=outsider).filter(pk=document.pk).exists()


# -------------------------------------------------------------------------- API tokens


def test_adding_a_token_shows_it_once_and_stores_only_its_hash(admin_client, asker):  # type: ignore[no-untyped-def]
    response = admin_client.post(
        reverse("admin:answers_apitoken_add"), {"user": asker.pk, "name": "laptop"}
    )
    assert response.status_code == 302
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    shown = [re.search(r"<code>(ca_[\w-]+)</code>", m) for m in messages]
    raws = [m.group(1) for m in shown if m]
    assert len(raws) == 1
    raw = raws[0]
    # The redirect target displays the message, once.
    page = admin_client.get(response.url).content.decode()
    assert f"<code>{raw}</code>" in page

    token = ApiToken.objects.get()
    assert (token.user, token.name) == (asker, "laptop")
    assert raw.startswith(token.prefix)
    assert token.token_hash != raw and raw not in token.token_hash
    assert len(token.token_hash) == 64
    authenticated = services.api_token_authenticate(raw=raw)
    assert authenticated is not None and authenticated.pk == token.pk
    assert authenticated.user == asker

    # Never shown again: not on the change page, not on the list.
    for url in (
        reverse("admin:answers_apitoken_change", args=[token.pk]),
        reverse("admin:answers_apitoken_changelist"),
    ):
        assert raw not in admin_client.get(url).content.decode()


def test_revoke_tokens_action_revokes(admin_client, asker):  # type: ignore[no-untyped-def]
    _kept, kept_raw = services.api_token_create(user=asker, name="kept")
    revoked, revoked_raw = services.api_token_create(user=asker, name="revoked")
    assert services.api_token_authenticate(raw=revoked_raw) is not None

    response = admin_client.post(
        reverse("admin:answers_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [revoked.pk]},
    )
    assert response.status_code == 302
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert "Revoked 1 token(s)." in messages

    revoked.refresh_from_db()
    assert revoked.revoked_at is not None
    assert services.api_token_authenticate(raw=revoked_raw) is None
    assert services.api_token_authenticate(raw=kept_raw) is not None


def test_revoking_an_already_revoked_token_neither_counts_nor_moves_it(admin_client, asker):  # type: ignore[no-untyped-def]
    old, _ = services.api_token_create(user=asker, name="old")
    services.api_token_revoke(token=old)
    old.refresh_from_db()
    active, _ = services.api_token_create(user=asker, name="active")
    response = admin_client.post(
        reverse("admin:answers_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [old.pk, active.pk]},
    )
    assert response.status_code == 302
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Revoked 1 token(s); 1 already revoked."]
    assert ApiToken.objects.get(pk=old.pk).revoked_at == old.revoked_at
    assert ApiToken.objects.get(pk=active.pk).revoked_at is not None


def test_renaming_a_token_changes_its_name_only(admin_client, asker):  # type: ignore[no-untyped-def]
    token, raw = services.api_token_create(user=asker, name="laptop")
    response = admin_client.post(
        reverse("admin:answers_apitoken_change", args=[token.pk]),
        {"name": "desktop", "user": "0", "prefix": "x", "token_hash": "x"},
    )
    assert response.status_code == 302
    stored = ApiToken.objects.get(pk=token.pk)
    assert (stored.name, stored.user, stored.prefix) == ("desktop", asker, token.prefix)
    assert (stored.token_hash, stored.revoked_at) == (token.token_hash, None)
    assert services.api_token_authenticate(raw=raw) is not None


def test_added_token_is_named_with_its_prefix(admin_client, asker):  # type: ignore[no-untyped-def]
    from django.contrib.admin.models import LogEntry

    response = admin_client.post(
        reverse("admin:answers_apitoken_add"), {"user": asker.pk, "name": "laptop"}, follow=True
    )
    token = ApiToken.objects.get()
    assert token.prefix.startswith("ca_") and len(token.prefix) == 9
    added = [str(m) for m in response.context["messages"] if "added successfully" in str(m)]
    assert len(added) == 1
    assert f"laptop ({token.prefix}…)" in added[0], "the success message tells the token apart"
    entry = LogEntry.objects.get(object_id=str(token.pk))
    assert entry.object_repr == str(token)


def _token_staff(django_user_model):  # type: ignore[no-untyped-def]
    """Staff who may add and view tokens, and nothing else."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(username="tokens", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["add_apitoken", "view_apitoken"])
    )
    return user


def test_staff_who_are_not_superusers_create_tokens_only_for_themselves(
    client, django_user_model, admin_user, asker
):  # type: ignore[no-untyped-def]
    # A token acts with its user's permissions: one for the superuser would be theirs.
    staff = _token_staff(django_user_model)
    theirs, _ = services.api_token_create(user=asker, name="someone else's")
    client.force_login(staff)
    form = client.get(reverse("admin:answers_apitoken_add")).content.decode()
    choices = set(re.findall(r'<option value="(\d+)"', form))
    assert choices == {str(staff.pk)}  # nobody else to pick
    for target in (admin_user, asker):
        response = client.post(
            reverse("admin:answers_apitoken_add"), {"user": target.pk, "name": "escalate"}
        )
        assert response.status_code == 200  # the form again, with its error
        assert not ApiToken.objects.filter(name="escalate").exists()
    response = client.post(reverse("admin:answers_apitoken_add"), {"user": staff.pk, "name": "own"})
    assert response.status_code == 302
    assert ApiToken.objects.get(name="own").user == staff
    # Other users' tokens are neither listed nor opened.
    listing = client.get(reverse("admin:answers_apitoken_changelist")).content.decode()
    assert "someone else" not in listing and "own" in listing
    change = client.get(reverse("admin:answers_apitoken_change", args=[theirs.pk]))
    assert change.status_code == 302  # the admin's "does not exist" redirect
    with pytest.raises(services.TokenNotPermitted):
        services.api_token_create(user=admin_user, name="x", created_by=staff)


def test_the_admin_shortcut_tells_no_document_id_apart(client):  # type: ignore[no-untyped-def]
    from django.contrib.contenttypes.models import ContentType

    restricted = Document.objects.create(
        title="Vault", source_key="admin:vault", access=Document.Access.GROUPS, body="x"
    )
    client.force_login(staff_reviewer("outsider"))
    kind = ContentType.objects.get_for_model(Document).pk
    missing = restricted.pk + 1000
    responses = [
        client.get(reverse("admin:view_on_site", args=[kind, pk])).status_code
        for pk in (restricted.pk, missing)
    ]
    assert responses == [404, 404]


def test_the_document_change_form_links_its_page(admin_client):  # type: ignore[no-untyped-def]
    document = Document.objects.create(title="Linked", source_key="admin:linked", body="x")
    page = admin_client.get(reverse("admin:answers_document_change", args=[document.pk]))
    assert reverse("answers:document", kwargs={"document_id": document.pk}) in page.content.decode()


# ------------------------------------------- reviewers and access (issue 14, point 3)

VAULT_QUESTION = "Where does the Nightjar zeppelin launch from?"
VAULT_SECRET = "hangar nine"  # quoted by the answer, only the vault memo has it
VAULT_TITLES = ("Project Nightjar launch plan", "Nightjar zeppelin hangar safety")
VAULT_FEEDBACK = "Nightjar feedback: check the mooring mast"
OSPREY = "Ospreys nest on tall dead trees near water. An osprey nest is reused for years."


@pytest.fixture
def review_case(member, asker, other_asker):  # type: ignore[no-untyped-def]
    """A vault member's answer quoting the vault memo (with feedback), a public answer,
    and an outsider's answer whose vault candidates were dropped; three reviewers."""
    vault = _answer(member, VAULT_QUESTION)
    assert VAULT_SECRET in vault.final_text
    services.feedback_record(answer=vault, user=member, rating="down", comment=VAULT_FEEDBACK)
    public = _answer(asker, "What is a lambda expression?")
    dropped = _answer(other_asker, "Nightjar zeppelin hangar lambda expression")
    # Scoped search (ADR 0009) never retrieves vault chunks for an outsider, but answers
    # stored before it, or by a backend that cannot scope, hold such candidates: record
    # them as the after-search filter does.
    vault_chunk = Chunk.objects.filter(document__title__in=VAULT_TITLES).first()
    assert vault_chunk is not None
    RetrievedSource.objects.create(
        question=dropped.question,
        document=vault_chunk.document,
        chunk=vault_chunk,
        rank=RetrievedSource.objects.filter(question=dropped.question).count() + 1,
        score=0.5,
        dropped_reason=RetrievedSource.Dropped.NO_ACCESS,
    )
    return {
        "vault": vault,
        "public": public,
        "dropped": dropped,
        "outsider": staff_reviewer("outsider"),
        "insider": staff_reviewer("insider", groups=("vault",)),
        "auditor": staff_reviewer("auditor", review_all=True),
    }


def _as(client, user):  # type: ignore[no-untyped-def]
    client.force_login(user)
    return client


def _assert_no_vault_words(html: str) -> None:
    for word in (VAULT_SECRET, VAULT_FEEDBACK, *VAULT_TITLES):
        assert word not in html, word


def test_a_reviewer_outside_vault_lists_and_searches_only_what_they_may_read(client, review_case):  # type: ignore[no-untyped-def]
    c = _as(client, review_case["outsider"])
    html = c.get(reverse(CHANGELIST)).content.decode()
    rows = _result_rows(html)
    assert len(rows) == 2, "the public answer and the outsider's own-scope answer"
    assert "2 answers" in html
    assert VAULT_QUESTION not in html
    _assert_no_vault_words(html)
    # Search finds nothing by the withheld text, question or asker; filters and their
    # counts see only the readable answers.
    for term in (VAULT_SECRET, "launches", "Nightjar zeppelin launch", "member"):
        html = c.get(reverse(CHANGELIST), {"q": term}).content.decode()
        # No total beside it (AnswerAdmin.show_full_result_count): none to leak either.
        assert "0 results (" in html and "Show all" in html and " total<" not in html, term
        assert VAULT_QUESTION not in html and VAULT_FEEDBACK not in html
    facets = {"status__exact": "complete", "_facets": "1"}
    html = c.get(reverse(CHANGELIST), facets).content.decode()
    assert VAULT_QUESTION not in html
    readable = Answer.objects.exclude(pk=review_case["vault"].pk)
    assert f"Complete ({readable.filter(status='complete').count()})" in html


@pytest.mark.parametrize("reviewer", ["insider", "auditor"])
def test_a_permitted_reviewer_lists_searches_and_opens_every_answer(client, review_case, reviewer):  # type: ignore[no-untyped-def]
    c = _as(client, review_case[reviewer])
    html = c.get(reverse(CHANGELIST)).content.decode()
    assert len(_result_rows(html)) == 3
    assert VAULT_QUESTION in html
    (row,) = _result_rows(c.get(reverse(CHANGELIST), {"q": VAULT_SECRET}).content.decode())
    assert "member" in row
    html = c.get(_change_url(review_case["vault"])).content.decode()
    assert VAULT_SECRET in html and VAULT_FEEDBACK in html
    assert all(title in html for title in VAULT_TITLES)


def _final_sources(html: str) -> list[tuple[str, str]]:
    """The change page's "Final sources, against the documents now": (status, text) each."""
    listing = html.split("class='answers-sources-now'>", 1)[1].split("</ol>", 1)[0]
    return re.findall(r"data-source-status='([\w-]+)'>(.*?)</li>", listing, re.S)


@pytest.mark.parametrize("reviewer", ["insider", "auditor"])
def test_a_permitted_reviewers_final_sources_agree_with_the_candidates_table(
    client, review_case, reviewer
):  # type: ignore[no-untyped-def]
    """The auditor (``review_all_answers``, in no group) reads every answer and every source
    in the admin (docs/access.md): the final Sources list names the vault sources the
    candidates table beside it shows, not "you may not view it", whether the document is
    still there or deleted since."""
    vault = review_case["vault"]
    cited = RetrievedSource.objects.filter(question=vault.question, final_number__isnull=False)
    cited_titles = set(cited.values_list("document__title", flat=True))
    assert cited_titles and cited_titles <= set(VAULT_TITLES)  # not vacuous
    c = _as(client, review_case[reviewer])
    shown = _final_sources(c.get(_change_url(vault)).content.decode())
    assert [status for status, _ in shown] == ["current"] * len(shown)
    assert all(any(title in text for title in cited_titles) for _, text in shown)

    # Deleted since: restricted when deleted, so no asker reads it again; the auditor's
    # table shows it as removed, and so does the list.
    Document.objects.filter(title__in=cited_titles).delete()
    html = c.get(_change_url(vault)).content.decode()
    if reviewer == "insider":
        return  # withheld from everyone without review_all_answers now (ADR 0040)
    shown = _final_sources(html)
    assert "<em>(removed)</em>" in html
    assert [status for status, _ in shown] == ["removed"] * len(shown)
    assert all(any(title in text for title in cited_titles) for _, text in shown)


def test_the_autocomplete_finds_for_a_reviewer_only_what_they_may_read(client, review_case):  # type: ignore[no-untyped-def]
    """Any related field reaches the admin's autocomplete (no form of ours uses it): it
    searches the reviewer's querysets, so vault words find nothing for an outsider."""

    def found(user, model: str, field: str, term: str) -> set[str]:  # type: ignore[no-untyped-def]
        c = _as(client, user)
        query = {"app_label": "answers", "model_name": model, "field_name": field, "term": term}
        response = c.get("/admin/autocomplete/", query)
        assert response.status_code == 200
        return {result["id"] for result in response.json()["results"]}

    vault = str(review_case["vault"].pk)
    vault_documents = {str(d.pk) for d in Document.objects.filter(title__in=VAULT_TITLES)}
    for term in (VAULT_SECRET, "member", ""):
        assert vault not in found(review_case["outsider"], "feedback", "answer", term), term
    for term in ("Nightjar", "vault:", ""):
        shown = found(review_case["outsider"], "retrievedsource", "document", term)
        assert not shown & vault_documents, term
    assert vault in found(review_case["insider"], "feedback", "answer", VAULT_SECRET)
    insider = found(review_case["insider"], "retrievedsource", "document", "Nightjar")
    assert vault_documents <= insider


def test_a_reviewer_outside_vault_cannot_open_or_review_a_withheld_answer(client, review_case):  # type: ignore[no-untyped-def]
    c = _as(client, review_case["outsider"])
    vault = review_case["vault"]
    missing = reverse("admin:answers_answer_change", args=[Answer.objects.last().pk + 1000])  # type: ignore[union-attr]
    for url in (
        _change_url(vault),
        reverse("admin:answers_answer_history", args=[vault.pk]),
    ):
        response = c.get(url, follow=True)
        # Exactly as for an answer that does not exist.
        assert response.redirect_chain == [(reverse("admin:index"), 302)], url
        _assert_no_vault_words(response.content.decode())
    assert c.get(missing).status_code == c.get(_change_url(vault)).status_code == 302
    response = c.post(_change_url(vault), {"reviewed": "on", "review_note": "seen it"})
    assert response.status_code == 302
    vault.refresh_from_db()
    assert (vault.reviewed, vault.review_note) == (False, "")


def test_a_readable_answer_shows_a_reviewer_no_candidate_they_may_not_view(client, review_case):  # type: ignore[no-untyped-def]
    """The outsider's answer is readable, but vault chunks matched its question and were
    dropped: a reviewer outside vault sees neither them nor a trace of them (no row, no rank
    gap, no count), since that they matched is itself a clue to the vault's words."""
    dropped = review_case["dropped"]
    stored = RetrievedSource.objects.filter(question=dropped.question)
    viewable = stored.exclude(document__source_key__startswith="vault:").count()
    assert viewable < stored.count()

    def table_and_row(user):  # type: ignore[no-untyped-def]
        c = _as(client, user)
        html = c.get(_change_url(dropped)).content.decode()
        assert "<th>Final [n]</th>" in html
        table = html.split("<th>Final [n]</th>", 1)[1].split("</table>", 1)[0]
        rows = re.findall(r"<tr>.*?</tr>", table, re.S)
        listing = c.get(reverse(CHANGELIST), {"q": "hangar lambda"}).content.decode()
        (row,) = _result_rows(listing)
        return html, rows, row

    html, rows, row = table_and_row(review_case["outsider"])
    _assert_no_vault_words(html)
    assert "The asking user may not view it" not in html
    ranks = [re.findall(r"<td>(.*?)</td>", r, re.S)[0] for r in rows]
    assert ranks == [str(n) for n in range(1, viewable + 1)]
    assert f'class="field-retrieved">{viewable}<' in row

    html, rows, row = table_and_row(review_case["insider"])
    assert any(title in html for title in VAULT_TITLES)
    assert "The asking user may not view it" in html
    assert len(rows) == stored.count()
    assert f'class="field-retrieved">{stored.count()}<' in row


def test_a_reviewer_sees_a_deleted_public_source_as_removed_with_its_passage(
    client, asker, scripted
):  # type: ignore[no-untyped-def]
    """A document open to everyone when the answer was written, deleted since: the answer
    stays readable (ADR 0022), and so does its source in the review, as "removed", with
    the passage its claim was checked against; not "a source you may not view"."""
    document = ingest_text("admin:osprey", "Osprey nesting notes", OSPREY).document
    scripted.script = ["Ospreys nest on tall dead trees [1]."]
    answer = _answer(asker, "Where do ospreys nest?")
    assert RetrievedSource.objects.filter(
        question=answer.question, document=document, cited=True
    ).exists()  # not vacuous
    c = _as(client, staff_reviewer("outsider"))
    assert "Osprey nesting notes" in c.get(_change_url(answer)).content.decode()

    # Through the admin, as a reviewer deletes it.
    admin = _as(client.__class__(), staff_reviewer("remover"))
    response = admin.post(
        reverse("admin:answers_document_delete", args=[document.pk]), {"post": "yes"}
    )
    assert response.status_code == 302 and not Document.objects.filter(pk=document.pk).exists()
    html = c.get(_change_url(answer)).content.decode()
    assert "(a source you may not view)" not in html
    assert "Osprey nesting notes <em>(removed)</em>" in html
    assert "tall dead trees" in html.split("<th>Passage</th>", 1)[1]
    table = html.split("<th>Final [n]</th>", 1)[1].split("</table>", 1)[0]
    shown = len(re.findall(r"<tr>.*?</tr>", table, re.S))
    (row,) = _result_rows(c.get(reverse(CHANGELIST), {"q": "ospreys"}).content.decode())
    assert f'class="field-retrieved">{shown}<' in row  # the count is of what is shown


def test_restricted_then_deleted_in_the_admin_an_answer_stays_withheld(client, asker, scripted):  # type: ignore[no-untyped-def]
    """ADR 0040 through the admin's own paths: restricted with the change form, deleted
    with the bulk action, a document open when the answer was written never comes back
    readable through it (document_snapshots_close on every deletion)."""
    from django.contrib.auth.models import Group

    from answers import presenters

    document = ingest_text("admin:osprey", "Osprey nesting notes", OSPREY).document
    scripted.script = ["Ospreys nest on tall dead trees [1]."]
    answer = _answer(asker, "Where do ospreys nest?")
    assert not presenters.answer_payload(answer=answer, user=asker).withheld
    admin = _as(client, staff_reviewer("keeper", groups=("vault",)))
    vault = Group.objects.get(name="vault")
    change = reverse("admin:answers_document_change", args=[document.pk])
    form = _document_form(document, access="groups", groups=[vault.pk])
    assert admin.post(change, form).status_code == 302
    assert presenters.answer_payload(answer=answer, user=asker).withheld
    response = admin.post(
        reverse("admin:answers_document_changelist"),
        {"action": "delete_selected", "_selected_action": [document.pk], "post": "yes"},
    )
    assert response.status_code == 302 and not Document.objects.filter(pk=document.pk).exists()
    shown = presenters.answer_payload(answer=answer, user=asker)
    assert shown.withheld and "tall dead trees" not in str(shown.to_dict())
    outsider = _as(client, staff_reviewer("outsider"))
    assert outsider.get(_change_url(answer)).status_code == 302  # "does not exist"


def test_a_reviewer_outside_vault_cannot_list_search_open_or_delete_vault_documents(
    client, review_case
):  # type: ignore[no-untyped-def]
    documents = reverse("admin:answers_document_changelist")
    vault_document = Document.objects.get(title=VAULT_TITLES[0])
    c = _as(client, review_case["outsider"])
    html = c.get(documents).content.decode()
    assert ">Lambdas<" in html
    _assert_no_vault_words(html)
    for term in ("Nightjar", "vault:"):
        html = c.get(documents, {"q": term}).content.decode()
        assert "0 results (" in html, term
        assert all(title not in html for title in VAULT_TITLES), term
    vault_group = vault_document.groups.get()
    html = c.get(documents, {"groups__id__exact": vault_group.pk}).content.decode()
    assert "0 documents" in html
    _assert_no_vault_words(html)
    change = reverse("admin:answers_document_change", args=[vault_document.pk])
    assert c.get(change, follow=True).redirect_chain == [(reverse("admin:index"), 302)]
    response = c.post(
        documents,
        {"action": "delete_selected", "_selected_action": [vault_document.pk], "post": "yes"},
    )
    assert response.status_code in (200, 302)
    assert Document.objects.filter(pk=vault_document.pk).exists()

    for reviewer in ("insider", "auditor"):
        c = _as(client, review_case[reviewer])
        assert VAULT_TITLES[0] in c.get(documents, {"q": "Nightjar"}).content.decode()
        assert c.get(change).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_live_admin_withholds_vault_answers_from_a_reviewer_outside_vault(
    daphne_live_server, review_case
):  # type: ignore[no-untyped-def]
    """The same rule through the running app (daphne, real HTTP, a real session)."""
    import httpx
    from django.test import Client

    def admin_session(user):  # type: ignore[no-untyped-def]
        browser = Client()
        browser.force_login(user)
        cookies = {"sessionid": browser.cookies["sessionid"].value}
        return httpx.Client(base_url=daphne_live_server.url, cookies=cookies, timeout=20.0)

    vault = review_case["vault"]
    with admin_session(review_case["outsider"]) as http:
        listing = http.get(reverse(CHANGELIST))
        assert listing.status_code == 200 and "2 answers" in listing.text
        assert VAULT_QUESTION not in listing.text
        _assert_no_vault_words(listing.text)
        found = http.get(reverse(CHANGELIST), params={"q": VAULT_SECRET})
        assert "0 results (" in found.text and VAULT_QUESTION not in found.text
        change = http.get(_change_url(vault))
        assert change.status_code == 302 and change.headers["location"] == reverse("admin:index")
        documents = http.get(reverse("admin:answers_document_changelist"), params={"q": "Night"})
        assert all(title not in documents.text for title in VAULT_TITLES)
    with admin_session(review_case["insider"]) as http:
        change = http.get(_change_url(vault))
        assert change.status_code == 200 and VAULT_SECRET in change.text
