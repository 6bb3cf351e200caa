"""Server-sent events over real HTTP: the app under daphne (tests/live.py), read with httpx."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from answers.citations import cited_numbers, iter_markers
from answers.models import Answer
from tests.helpers import assert_json_error, bearer_headers

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is a lambda expression?"
SSE = {"Accept": "text/event-stream"}


@dataclass
class ServerEvent:
    id: str | None
    event: str
    data: Any
    at: float = field(default=0.0)


def without_anchors(references: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "anchor"} for r in references]


def iter_events(response: httpx.Response) -> Iterator[ServerEvent]:
    """Parse ``text/event-stream`` incrementally, yielding each event as it completes."""
    fields: dict[str, list[str]] = {}
    for line in response.iter_lines():
        if line == "":
            if fields:
                yield ServerEvent(
                    id=fields.get("id", [None])[-1],
                    event=fields.get("event", ["message"])[-1],
                    data=json.loads("\n".join(fields.get("data", []))),
                    at=time.monotonic(),
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue  # a comment / keep-alive
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
    assert not fields, f"the stream ended inside an event: {fields}"


@pytest.fixture
def client(daphne_live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=daphne_live_server.url, timeout=20.0) as http:
        yield http


@pytest.fixture
def auth(asker) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return bearer_headers(asker, name="t")


def ask_streaming(
    client: httpx.Client, headers: dict[str, str], body: dict[str, Any]
) -> tuple[httpx.Response, list[ServerEvent]]:
    with client.stream("POST", "/api/answers", json=body, headers={**SSE, **headers}) as response:
        assert response.status_code == 200, response.read()
        return response, list(iter_events(response))


def test_sse_stream_headers_order_and_payloads(client, auth) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    response, events = ask_streaming(client, auth, {"question": QUESTION})

    assert response.headers["content-type"].startswith("text/event-stream")
    cache_control = {part.strip() for part in response.headers["cache-control"].split(",")}
    assert {"no-store", "no-cache"} <= cache_control
    assert response.headers["x-accel-buffering"] == "no"

    names = [e.event for e in events]
    assert names[0] == "references" and names.count("references") == 1, names
    assert names[-1] == "done" and names.count("done") == 1, names
    assert set(names[1:-1]) <= {"token", "citation"}, names
    assert "token" in names
    assert [e.id for e in events] == [str(n) for n in range(1, len(events) + 1)]

    references = events[0].data
    assert set(references) == {"type", "answer_id", "conversation_id", "turn", "references"}
    assert references["turn"] == 1
    uuid.UUID(references["conversation_id"])
    retrieved = references["references"]
    assert retrieved, "the lambda question retrieves sources"
    assert [r["index"] for r in retrieved] == list(range(1, len(retrieved) + 1))

    # The text streamed so far only ever cites sources that exist.
    tokens = [e.data["text"] for e in events if e.event == "token"]
    streamed = "".join(tokens)
    assert streamed.strip()
    numbers = [n for marker in iter_markers(streamed) for n in marker.numbers]
    assert numbers, "the extractive answer cites its sources"
    assert all(1 <= n <= len(retrieved) for n in numbers), numbers

    # One citation event per first citation, in order, with the source's document.
    citations = [e.data for e in events if e.event == "citation"]
    assert [c["number"] for c in citations] == cited_numbers(streamed)
    by_number = {r["index"]: r["document_id"] for r in retrieved}
    assert all(c["document_id"] == by_number[c["number"]] for c in citations)

    # It streams: the references arrive well before the (slowed down) answer ends.
    assert events[0].at - started < events[-1].at - started
    assert events[-1].at - events[0].at > 0.1

    done = events[-1].data
    assert done["answer_id"] == references["answer_id"]
    assert done["conversation_id"] == references["conversation_id"]
    assert done["status"] == "complete"
    assert set(done["number_map"]) <= {str(n) for n in numbers}
    stored = client.get(f"/api/answers/{done['answer_id']}", headers=auth)
    assert stored.status_code == 200
    assert {k: v for k, v in done.items() if k not in ("number_map", "type")} == stored.json()


def test_sse_and_json_give_the_same_answer(client, auth) -> None:  # type: ignore[no-untyped-def]
    _, events = ask_streaming(client, auth, {"question": QUESTION})
    streamed = events[-1].data
    plain = client.post("/api/answers", json={"question": QUESTION}, headers=auth)

    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("application/json")
    body = plain.json()
    assert body["answer_id"] != streamed["answer_id"]
    assert body["text"] == streamed["text"]
    # Two answers: the same references but for the anchors, which are per answer.
    assert without_anchors(body["references"]) == without_anchors(streamed["references"])
    assert body["status"] == streamed["status"] == "complete"


def test_sse_follow_up_continues_the_conversation(client, auth) -> None:  # type: ignore[no-untyped-def]
    _, first = ask_streaming(client, auth, {"question": QUESTION})
    conversation_id = first[0].data["conversation_id"]
    _, second = ask_streaming(
        client,
        auth,
        {
            "question": "and how does it differ from a def function?",
            "conversation_id": conversation_id,
        },
    )
    assert second[0].data["conversation_id"] == conversation_id
    assert second[0].data["turn"] == 2
    assert second[-1].event == "done"
    assert second[-1].data["answer_id"] != first[-1].data["answer_id"]


@pytest.mark.parametrize(
    ("body", "with_auth", "status", "code"),
    [
        pytest.param({"question": QUESTION}, False, 401, None, id="no-auth"),
        pytest.param({"question": "   "}, True, 422, "invalid_question", id="blank"),
        pytest.param(
            {"question": QUESTION, "conversation_id": str(uuid.uuid4())},
            True,
            404,
            "not_found",
            id="unknown-conversation",
        ),
    ],
)
def test_refusals_are_json_before_any_event(  # type: ignore[no-untyped-def]
    client, auth, body, with_auth, status, code
) -> None:
    response = client.post(
        "/api/answers", json=body, headers={**SSE, **(auth if with_auth else {})}
    )

    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "event:" not in response.text
    payload = response.json()
    assert payload["detail"]
    if code is not None:
        assert payload["code"] == code
    assert not Answer.objects.exists()


def _drop_after_first_token(client, auth) -> list[ServerEvent]:  # type: ignore[no-untyped-def]
    seen = []
    with client.stream(
        "POST", "/api/answers", json={"question": QUESTION}, headers={**SSE, **auth}
    ) as response:
        assert response.status_code == 200
        for event in iter_events(response):
            seen.append(event)
            if event.event == "token":
                return seen  # leaving the block closes the connection mid-answer
    pytest.fail("the stream ended before its first token")


def _wait_for_status(answer_id: int) -> str:
    deadline = time.monotonic() + 20
    status = Answer.objects.get(pk=answer_id).status
    while status == Answer.Status.STREAMING and time.monotonic() < deadline:
        time.sleep(0.1)
        status = Answer.objects.get(pk=answer_id).status
    return status


def test_a_client_that_drops_resumes_with_last_event_id(client, auth) -> None:  # type: ignore[no-untyped-def]
    before = _drop_after_first_token(client, auth)
    answer_id = before[0].data["answer_id"]
    with client.stream(
        "GET",
        f"/api/answers/{answer_id}/events",
        headers={**SSE, **auth, "Last-Event-ID": before[-1].id},
    ) as response:
        assert response.status_code == 200
        rest = list(iter_events(response))
    events = before + rest
    assert [e.id for e in events] == [str(n) for n in range(1, len(events) + 1)]
    assert rest[-1].event == "done" and rest[-1].data["status"] == "complete"
    stored = Answer.objects.get(pk=answer_id)
    assert "".join(e.data["text"] for e in events if e.event == "token") == stored.raw_text


def test_a_client_that_drops_does_not_stop_the_answer(client, auth) -> None:  # type: ignore[no-untyped-def]
    answer_id = _drop_after_first_token(client, auth)[0].data["answer_id"]
    assert _wait_for_status(answer_id) == Answer.Status.COMPLETE
    # Long finished: ?after= replays what is left of the log, here nothing but the end.
    response = client.get(f"/api/answers/{answer_id}/events?after=0", headers={**SSE, **auth})
    names = [e.event for e in iter_events(response)]
    assert names[0] == "references" and names[-1] == "done"


def test_stop_ends_the_answer_for_its_followers(client, auth) -> None:  # type: ignore[no-untyped-def]
    answer_id = _drop_after_first_token(client, auth)[0].data["answer_id"]
    stopped = client.post(f"/api/answers/{answer_id}/stop", headers=auth)
    assert stopped.status_code == 202, stopped.text
    assert stopped.json() == {"answer_id": answer_id, "status": "stopping"}
    response = client.get(f"/api/answers/{answer_id}/events", headers={**SSE, **auth})
    last = list(iter_events(response))[-1]
    assert last.event == "done" and last.data["status"] == "interrupted"
    answer = Answer.objects.get(pk=answer_id)
    assert answer.status == Answer.Status.INTERRUPTED
    assert answer.error == "stopped by the client"
    again = client.post(f"/api/answers/{answer_id}/stop", headers=auth)
    assert again.status_code == 409, again.text
    assert again.json() == {
        "detail": "The answer is not being generated.",
        "code": "not_streaming",
        "answer_id": answer_id,
        "status": "interrupted",
    }


def test_only_the_owner_follows_or_stops_an_answer(client, auth, other_asker) -> None:  # type: ignore[no-untyped-def]
    answer_id = _drop_after_first_token(client, auth)[0].data["answer_id"]
    other = bearer_headers(other_asker, name="other")
    for method, path in (("GET", "events"), ("POST", "stop")):
        response = client.request(method, f"/api/answers/{answer_id}/{path}", headers=other)
        assert_json_error(response, 404, "not_found")
    assert _wait_for_status(answer_id) == Answer.Status.COMPLETE


@pytest.mark.parametrize("on_the_url", ["earlier", "later"])
def test_after_and_last_event_id_resume_after_the_later(client, auth, on_the_url) -> None:  # type: ignore[no-untyped-def]
    _, asked = ask_streaming(client, auth, {"question": QUESTION})
    answer_id, seen = asked[0].data["answer_id"], len(asked) - 2
    # An EventSource opened on `?after=2` reconnects to the same URL with the header.
    query, header = (2, seen) if on_the_url == "earlier" else (seen, 2)
    with client.stream(
        "GET",
        f"/api/answers/{answer_id}/events?after={query}",
        headers={**SSE, **auth, "Last-Event-ID": str(header)},
    ) as response:
        assert response.status_code == 200
        rest = list(iter_events(response))
    assert [e.id for e in rest] == [str(seen + 1), str(seen + 2)]
    assert [e.event for e in rest][-1] == "done"


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        ("?after=-1", {}),
        ("?after=x", {}),
        ("", {"Last-Event-ID": "abc"}),
        ("", {"Last-Event-ID": "-2"}),
        ("?after=2", {"Last-Event-ID": "abc"}),
    ],
)
def test_bad_resume_positions_are_refused_as_json(client, auth, query, headers) -> None:  # type: ignore[no-untyped-def]
    response = client.get(f"/api/answers/1/events{query}", headers={**SSE, **auth, **headers})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")


@pytest.fixture
def slow_client(slow_live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=slow_live_server.url, timeout=60.0) as http:
        yield http


def _answer_streaming(user: Any) -> Answer:
    """The answer ``user``'s JSON ask is generating, once it has begun (waited for)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer = Answer.objects.filter(question__user=user, status=Answer.Status.STREAMING).first()
        if answer is not None:
            return answer
        time.sleep(0.02)
    pytest.fail("the answer never began")


def test_a_json_answer_can_be_followed_and_stopped_while_it_is_generated(
    slow_client, auth, asker
) -> None:  # type: ignore[no-untyped-def]
    # A service waits for the whole JSON answer; meanwhile its owner may watch it stream
    # and stop it from anywhere, as for a streamed one (not a 202 that stops nothing).
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(
            slow_client.post, "/api/answers", json={"question": QUESTION}, headers=auth
        )
        answer_id = _answer_streaming(asker).pk
        with slow_client.stream(
            "GET", f"/api/answers/{answer_id}/events", headers={**SSE, **auth}
        ) as follow:
            assert follow.status_code == 200
            events = iter_events(follow)
            assert next(events).event == "references"
            stopped = slow_client.post(f"/api/answers/{answer_id}/stop", headers=auth)
            assert stopped.status_code == 202, stopped.text
            followed = list(events)
        response = asked.result(timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "interrupted"
    last = followed[-1]
    assert (last.event, last.data["status"], last.data["text"]) == ("done", *_status_text(body))
    stored = Answer.objects.get(pk=answer_id)
    assert (stored.status, stored.error) == (Answer.Status.INTERRUPTED, "stopped by the client")


def _status_text(body: dict[str, Any]) -> tuple[str, str]:
    return body["status"], body["text"]


def test_a_json_answer_goes_on_when_its_asker_leaves(slow_live_server, auth, asker) -> None:  # type: ignore[no-untyped-def]
    with (
        httpx.Client(base_url=slow_live_server.url, timeout=1.0) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        impatient.post("/api/answers", json={"question": QUESTION}, headers=auth)
    answer_id = _answer_streaming(asker).pk
    assert _wait_for_status(answer_id) == Answer.Status.COMPLETE
