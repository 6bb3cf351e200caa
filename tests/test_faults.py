"""The OpenAI-compatible provider against a real local server that misbehaves on purpose,
on the JSON path and on the streamed (WebSocket) path."""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync

from answers.models import Answer
from answers.pipeline import GENERIC_ERROR
from tests.helpers import api_post
from tests.llm_server import serving
from tests.sockets import ask_on, connected, scoped_socket

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is a lambda expression?"


@pytest.fixture
def fake_llm(settings):  # type: ignore[no-untyped-def]
    limits = {"FIRST_TOKEN_TIMEOUT": 0.5, "IDLE_TIMEOUT": 0.5, "TOTAL_TIMEOUT": 5.0}
    retries = {"MAX_EMPTY_DELTAS": 50, "PROVIDER_RETRIES": 2, "RETRY_BACKOFF": 0.05}
    with serving(settings, **limits, **retries) as server:
        yield server


def ask_json(client, user):  # type: ignore[no-untyped-def]
    response = api_post(client, "/api/answers", {"question": QUESTION}, user=user)
    return response, Answer.objects.order_by("-pk").first()


async def _ask_socket(user):  # type: ignore[no-untyped-def]
    comm = await connected(scoped_socket(user))
    messages = await ask_on(comm, QUESTION, timeout=10)
    await comm.disconnect(timeout=30)
    return messages


ask_socket = async_to_sync(_ask_socket)

FAULTS = {
    "stall before the first token": (
        [{"kind": "stall_first", "deltas": ["Late [1]."], "seconds": 3}], "", "first-token timeout"
    ),
    "stall mid-stream": (
        [{"kind": "stall_mid", "deltas": ["Part one [1].", " part two"], "after": 1, "seconds": 3}],
        "Part one [1].",
        "idle timeout",
    ),
    "500 every time": ([{"kind": "status", "status": 500}], "", "HTTP 500"),
    "connection reset mid-stream": (
        [{"kind": "cut", "reset": True, "deltas": ["First [1].", " second"], "after": 1}],
        "First [1].",
        "APIConnectionError",
    ),
    "garbage chunk": (
        [{"kind": "garbage", "deltas": ["Start [1]."]}], "Start [1].", "malformed chunk"
    ),
    "invalid UTF-8 in a chunk": (
        [{"kind": "frames", "frames": ["Start [1].", b'data: {"choices": [{"index": 0, '
          b'"delta": {"content": "caf\xc3"}, "finish_reason": null}]}\n\n']}],
        "Start [1].",
        "malformed chunk",
    ),
    "stopped at the model's token limit": (
        [{"kind": "frames", "frames": ["Lambdas are [1]", " small and"], "finish": "length"}],
        "Lambdas are [1] small and",
        "token limit (finish_reason 'length')",
    ),
    "stopped by a content filter": (
        [{"kind": "frames", "frames": ["Lambdas are [1]"], "finish": "content_filter"}],
        "Lambdas are [1]",
        "content filter (finish_reason 'content_filter')",
    ),
    "a tool call instead of text": (
        [{"kind": "frames", "finish": "tool_calls", "frames": [{"choices": [{"index": 0,
          "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                    "function": {"name": "search", "arguments": "{}"}}]},
          "finish_reason": None}]}]}],
        "",
        "finish_reason 'tool_calls'",
    ),
    "a finished stream without any text": (
        [{"kind": "frames", "frames": ["", {"choices": []}]}], "", "no text"
    ),
    "an error event after some text": (
        [{"kind": "frames", "finish": None, "done": False, "frames": [
            "Part one [1].", {"error": {"message": "model overloaded", "type": "server_error"}}]}],
        "Part one [1].",
        "model overloaded",
    ),
    "an error object mid-stream (older vLLM)": (
        [{"kind": "frames", "finish": None, "done": False, "frames": ["Part one [1].", {
            "object": "error", "message": "CUDA out of memory", "type": "InternalServerError",
            "code": 500}]}],
        "Part one [1].",
        "CUDA out of memory",
    ),
    "[DONE] without a finish_reason": (
        [{"kind": "frames", "frames": ["Part one [1]."], "finish": None}],
        "Part one [1].",
        "without a finish_reason",
    ),
    "endless empty deltas": ([{"kind": "empty_forever"}], "", "empty deltas"),
    "cut connection": (
        [{"kind": "cut", "deltas": ["First [1].", " second", " third"], "after": 1}],
        "First [1].",
        "",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_on_the_json_path_are_a_generic_502_with_the_partial_kept(
    corpus, asker, client, fake_llm, fault
):
    behaviours, partial, reason = FAULTS[fault]
    fake_llm.behaviours = list(behaviours)
    response, answer = ask_json(client, asker)
    assert response.status_code == 502
    body = response.json()
    assert body["detail"] == GENERIC_ERROR and body["answer_id"] == answer.pk
    assert "upstream" not in response.content.decode()
    assert answer.status == Answer.Status.FAILED
    assert answer.raw_text == partial
    assert reason in answer.error


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_on_the_streamed_path_end_with_a_generic_error_and_keep_the_partial(
    corpus, asker, fake_llm, fault
):
    behaviours, partial, reason = FAULTS[fault]
    fake_llm.behaviours = list(behaviours)
    messages = ask_socket(asker)
    assert messages[0]["type"] == "references"
    assert messages[-1] == {
        "seq": len(messages), "type": "error", "message": GENERIC_ERROR,
        "code": "generation_failed", "answer_id": messages[0]["answer_id"],
    }  # fmt: skip
    shown = "".join(m["text"] for m in messages if m["type"] == "token")
    answer = Answer.objects.get(pk=messages[0]["answer_id"])
    assert answer.status == Answer.Status.FAILED
    assert answer.raw_text == partial and partial.startswith(shown.rstrip())
    assert reason in answer.error


def test_a_retryable_error_before_the_first_token_is_retried(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [
        {"kind": "status", "status": 429},
        {"kind": "status", "status": 503},
        {"kind": "ok", "deltas": ["Lambdas ", "are small [1]."], "usage": (120, 9)},
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert response.json()["text"] == "Lambdas are small [1]."
    assert len(fake_llm.requests) == 3
    assert (answer.status, answer.prompt_tokens, answer.completion_tokens) == ("complete", 120, 9)


def test_500_is_retried_a_bounded_number_of_times(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [{"kind": "status", "status": 500}]
    ask_json(client, asker)
    assert len(fake_llm.requests) == 3  # one try and PROVIDER_RETRIES retries


def test_a_client_error_is_not_retried(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [{"kind": "status", "status": 400}]
    response, _ = ask_json(client, asker)
    assert response.status_code == 502 and len(fake_llm.requests) == 1


def test_after_tokens_there_is_no_retry(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [
        {"kind": "cut", "deltas": ["First [1].", " second"], "after": 1},
        {"kind": "ok", "deltas": ["Something else entirely."]},
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502 and len(fake_llm.requests) == 1
    assert answer.raw_text == "First [1]."


def test_the_answer_length_cap(corpus, asker, client, fake_llm, settings):
    settings.ANSWERS = {**settings.ANSWERS, "MAX_ANSWER_CHARS": 20}
    fake_llm.behaviours = [{"kind": "ok", "deltas": ["0123456789", "0123456789", "overflow"]}]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502
    assert answer.raw_text == "01234567890123456789" and "longer than" in answer.error


def test_the_total_duration_cap(corpus, asker, client, fake_llm, settings):
    settings.ANSWERS = {**settings.ANSWERS, "TOTAL_TIMEOUT": 0.6}
    fake_llm.behaviours = [{"kind": "ok", "deltas": ["tick "] * 20, "pace": 0.1}]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502 and "total duration" in answer.error
    assert answer.raw_text.startswith("tick ") and answer.raw_text != "tick " * 20


def test_the_prompt_reaches_the_server_with_the_citation_contract(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [{"kind": "ok", "deltas": ["Yes [1]."]}]
    ask_json(client, asker)
    request = fake_llm.requests[-1]
    assert request["model"] == "local-test" and request["stream"] is True
    assert "[1]" in request["messages"][0]["content"]
    assert "BEGIN SOURCE [1]" in request["messages"][-1]["content"]


def test_stop_mid_stream_cancels_the_upstream_request(corpus, asker, fake_llm):
    fake_llm.behaviours = [{"kind": "ok", "deltas": ["word "] * 200, "pace": 0.02}]

    async def run():  # type: ignore[no-untyped-def]
        comm = await connected(scoped_socket(asker))
        await comm.send_json_to({"type": "ask", "question": QUESTION})
        first = await comm.receive_json_from(timeout=30)
        while (await comm.receive_json_from(timeout=30))["type"] != "token":
            pass
        await comm.send_json_to({"type": "stop"})
        while (message := await comm.receive_json_from(timeout=30))["type"] != "done":
            pass
        await comm.disconnect(timeout=30)
        return first, message

    first, done = async_to_sync(run)()
    assert done["status"] == "interrupted"
    # The server notices the closed connection at its next write: well within a second.
    assert fake_llm.closed_early.wait(1.0)
    answer = Answer.objects.get(pk=first["answer_id"])
    assert answer.status == "interrupted" and answer.raw_text.startswith("word ")
    assert len(answer.raw_text) < len("word ") * 200


def test_a_misbehaving_stream_does_not_affect_another(corpus, asker, other_asker, fake_llm):
    fake_llm.behaviours = [
        {"kind": "garbage", "deltas": ["Bad [1]."]},
        {"kind": "ok", "deltas": ["Good [1]."]},
    ]

    async def both():  # type: ignore[no-untyped-def]
        import asyncio

        return await asyncio.gather(_ask_socket(asker), _ask_socket(other_asker))

    results = async_to_sync(both)()
    finals = sorted(r[-1]["type"] for r in results)
    assert finals == ["done", "error"]


def test_missing_model_is_reported_by_the_system_check(settings):
    from answers.checks import check_answers_settings

    settings.ANSWERS = {"PROVIDER": "openai", "MODEL": ""}
    ids = {e.id for e in check_answers_settings()}
    assert "answers.E011" in ids


def test_missing_key_for_the_public_api_is_reported(settings, monkeypatch):
    from answers.checks import check_answers_settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    settings.ANSWERS = {"PROVIDER": "openai", "MODEL": "gpt-4o-mini"}
    assert "answers.E012" in {e.id for e in check_answers_settings()}
    settings.ANSWERS = {"PROVIDER": "openai", "MODEL": "llama3.1",
                        "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}  # fmt: skip
    assert not {e.id for e in check_answers_settings()} & {"answers.E011", "answers.E012"}


def test_json_error_bodies_leak_nothing(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [{"kind": "status", "status": 401}]
    response, _ = ask_json(client, asker)
    text = json.dumps(response.json())
    assert "upstream" not in text and "401" not in text and "Traceback" not in text


def test_retry_before_the_first_token_on_the_streamed_path(corpus, asker, fake_llm):
    fake_llm.behaviours = [
        {"kind": "status", "status": 429},
        {"kind": "ok", "deltas": ["Lambdas ", "are small [1]."]},
    ]
    messages = ask_socket(asker)
    assert messages[-1]["type"] == "done" and messages[-1]["text"] == "Lambdas are small [1]."
    assert "".join(m["text"] for m in messages if m["type"] == "token") == "Lambdas are small [1]."
    assert len(fake_llm.requests) == 2


@pytest.mark.parametrize(
    ("limits", "behaviour", "reason"),
    [
        ({"MAX_ANSWER_CHARS": 20}, {"kind": "ok", "deltas": ["0123456789"] * 3}, "longer than"),
        ({"TOTAL_TIMEOUT": 0.6}, {"kind": "ok", "deltas": ["tick "] * 20, "pace": 0.1},
         "total duration"),
    ],
)  # fmt: skip
def test_caps_on_the_streamed_path(corpus, asker, fake_llm, settings, limits, behaviour, reason):
    settings.ANSWERS = {**settings.ANSWERS, **limits}
    fake_llm.behaviours = [behaviour]
    messages = ask_socket(asker)
    assert messages[-1]["type"] == "error" and messages[-1]["message"] == GENERIC_ERROR
    answer = Answer.objects.get(pk=messages[0]["answer_id"])
    assert answer.status == "failed" and reason in answer.error and answer.raw_text


def _content(escaped: bytes) -> bytes:
    """A chunk whose content is JSON text as it is (``\\uXXXX`` escapes kept)."""
    return (
        b'data: {"choices": [{"index": 0, "delta": {"content": "' + escaped
        + b'"}, "finish_reason": null}]}\n\n'
    )  # fmt: skip


# A server that cuts text between the two UTF-16 halves of a character (JSON escapes each
# half on its own, as JavaScript's JSON.stringify does), then sends a half that is alone.
SPLIT_CHARACTER = {"kind": "frames", "frames": [
    _content(b"Smile \\ud83d"), _content(b"\\ude00 [1]. Odd \\ud800"), "!",
]}  # fmt: skip


def test_a_character_split_across_deltas_arrives_whole(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [SPLIT_CHARACTER]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete"
    assert answer.raw_text == "Smile \U0001f600 [1]. Odd \ufffd!"
    assert response.json()["text"] == answer.final_text == answer.raw_text
    messages = ask_socket(asker)
    assert messages[-1]["type"] == "done" and messages[-1]["text"] == answer.raw_text
    assert "".join(m["text"] for m in messages if m["type"] == "token") == answer.raw_text


def test_a_429_that_asks_for_longer_than_an_answer_may_wait_is_not_hammered(
    corpus, asker, client, fake_llm
):
    # FIRST_TOKEN_TIMEOUT is 0.5 s: a retry in 30 s would only be refused again.
    fake_llm.behaviours = [
        {"kind": "status", "status": 429, "headers": {"Retry-After": "30"}},
        {"kind": "ok", "deltas": ["Too soon [1]."]},
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502 and len(fake_llm.requests) == 1
    assert answer.status == "failed" and "retry after 30 s" in answer.error


def test_a_429_whose_retry_after_is_a_date_is_read_as_one(corpus, asker, client, fake_llm):
    """Retry-After may be an HTTP date (RFC 9110): a minute from now is longer than an
    answer may wait, so it is not retried, as with ``Retry-After: 60``."""
    from email.utils import formatdate

    when = formatdate(time.time() + 60, usegmt=True)
    fake_llm.behaviours = [
        {"kind": "status", "status": 429, "headers": {"Retry-After": when}},
        {"kind": "ok", "deltas": ["Too soon [1]."]},
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502 and len(fake_llm.requests) == 1
    assert answer.status == "failed" and "retry after 5" in answer.error  # 59-60 s


def test_a_429_whose_retry_after_date_has_passed_is_retried(corpus, asker, client, fake_llm):
    from email.utils import formatdate

    when = formatdate(time.time() - 60, usegmt=True)
    fake_llm.behaviours = [
        {"kind": "status", "status": 429, "headers": {"Retry-After": when}},
        {"kind": "ok", "deltas": ["Lambdas are small [1]."]},
    ]  # fmt: skip
    response, answer = ask_json(client, asker)
    assert response.status_code == 200 and len(fake_llm.requests) == 2
    assert answer.status == "complete"


def test_a_429_with_a_short_retry_after_is_retried(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [
        {"kind": "status", "status": 429, "headers": {"retry-after-ms": "100"}},
        {"kind": "ok", "deltas": ["Lambdas are small [1]."]},
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200 and len(fake_llm.requests) == 2
    assert answer.status == "complete"


def test_an_exhausted_quota_is_not_retried_and_the_admin_sees_why(corpus, asker, client, fake_llm):
    quota = {"message": "You exceeded your current quota.", "type": "insufficient_quota",
             "code": "insufficient_quota"}  # fmt: skip
    fake_llm.behaviours = [{"kind": "status", "status": 429, "error": quota}]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502 and len(fake_llm.requests) == 1
    assert "insufficient_quota" in answer.error
    assert "quota" not in response.content.decode()


def test_a_server_that_accepts_and_never_answers_is_given_up_on(corpus, asker, client, fake_llm):
    fake_llm.behaviours = [{"kind": "hang", "seconds": 30}]
    response, answer = ask_json(client, asker)
    assert response.status_code == 502
    assert answer.status == "failed" and "first-token timeout" in answer.error


def test_a_nul_character_from_the_model_does_not_keep_the_answer_from_being_stored(
    corpus, asker, client, fake_llm
):
    # JSON carries it ("\u0000"); PostgreSQL's text cannot.
    fake_llm.behaviours = [{"kind": "frames", "frames": ["Odd \x00 byte [1]."]}]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete" and answer.raw_text == "Odd \ufffd byte [1]."


def test_chunks_the_protocol_does_not_describe_are_skipped_not_stored(
    corpus, asker, client, fake_llm
):
    # Token counts no column holds, a second choice (n=1 was asked), chunks that are no
    # objects: the answer is the first choice's text, stored, and the counts unknown.
    odd_usage = {"choices": [], "usage": {"prompt_tokens": -5, "completion_tokens": "many"}}
    second = {"choices": [{"index": 1, "delta": {"content": "Other [2]."}, "finish_reason": None}]}
    fake_llm.behaviours = [{"kind": "frames", "frames": [
        b'data: "hello"\n\n', b"data: [1, 2]\n\n", odd_usage, second, "Lambdas are small [1].",
    ]}]  # fmt: skip
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete" and answer.raw_text == "Lambdas are small [1]."
    assert (answer.prompt_tokens, answer.completion_tokens) == (None, None)


def test_a_finished_answer_whose_server_holds_the_connection_open_is_complete(
    corpus, asker, client, fake_llm
):
    # finish_reason "stop", then neither [DONE] nor the end of the body: the answer is whole,
    # and waiting for the rest until IDLE_TIMEOUT (0.5 s here) must not fail it.
    fake_llm.behaviours = [
        {"kind": "frames", "frames": ["Lambdas are small [1]."], "done": False, "linger": 5}
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete" and answer.raw_text == "Lambdas are small [1]."


def test_the_admin_sees_what_the_server_said_and_the_asker_does_not(
    corpus, asker, client, fake_llm
):
    said = {"message": "This model's maximum context length is 8192 tokens", "type": "invalid"}
    fake_llm.behaviours = [{"kind": "status", "status": 400, "error": said}]
    response, answer = ask_json(client, asker)
    assert answer.error == (
        "ProviderError: BadRequestError: HTTP 400: "
        "This model's maximum context length is 8192 tokens"
    )
    assert "context length" not in response.content.decode()


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_reasoning_model_thinking_at_length_is_not_an_endless_empty_stream(
    corpus, asker, client, fake_llm, field
):
    # vLLM and DeepSeek send the thinking as reasoning_content, Ollama and OpenRouter as
    # reasoning, content null meanwhile: more such chunks than MAX_EMPTY_DELTAS (50 here),
    # for longer in all than FIRST_TOKEN_TIMEOUT (0.5 s), each well within it.
    thought = {"choices": [{"index": 0, "delta": {field: "hmm "}, "finish_reason": None}]}
    fake_llm.behaviours = [
        {"kind": "frames", "frames": [thought] * 80 + ["Small [1]."], "pace": 0.01}
    ]
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete" and answer.raw_text == "Small [1]."


def test_thinking_inside_think_tags_is_neither_shown_nor_stored(corpus, asker, client, fake_llm):
    # A reasoning model served without a reasoning parser (llama.cpp, older Ollama) writes
    # its thinking into the content, between <think> tags, the tags cut anywhere.
    fake_llm.behaviours = [{"kind": "frames", "frames": [
        "\n<thi", "nk>\nThe user asks; source [2] is off topic", ", so</th", "ink>\n\nLambdas",
        " are small [1].",
    ]}]  # fmt: skip
    response, answer = ask_json(client, asker)
    assert response.status_code == 200, response.content
    assert answer.status == "complete" and answer.raw_text == "Lambdas are small [1]."
    messages = ask_socket(asker)
    shown = "".join(m["text"] for m in messages if m["type"] == "token")
    assert shown == messages[-1]["text"] == "Lambdas are small [1]."
