"""``manage.py evaluate``: the metrics on small sets, the floors' exit codes, bad input, and
the shipped test split holding the floors in eval/floors.json."""

from __future__ import annotations

import codecs
import errno
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from answers.evaluation import evaluation_run
from tests.corpus import ingest_text
from tests.llm_server import serving

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def gadgets() -> None:
    """Two documents whose words no other document has, so the ranks are certain."""
    ingest_text(
        "eval-test:zorblat",
        "Zorblat flange calibration",
        "The zorblat flange is calibrated with a brass wrenchlet every spring. "
        "Calibrating the zorblat flange takes an hour.",
    )
    ingest_text(
        "eval-test:quimbly",
        "Quimbly sprocket care",
        "A quimbly sprocket is greased with goose fat. Grease the quimbly sprocket monthly.",
    )


def write_set(tmp_path: Path, name: str, rows: list[object]) -> Path:
    path = tmp_path / name
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def evaluate(*args: object) -> str:
    out = io.StringIO()
    call_command("evaluate", *[str(a) for a in args], stdout=out)
    return out.getvalue()


def row(output: str, name: str) -> list[str]:
    for line in output.splitlines():
        if line.startswith(name + " ") or line == name:
            return line[len(name) :].split()
    raise AssertionError(f"no row {name!r} in:\n{output}")


SMALL = [
    {"question": "How is the zorblat flange calibrated?", "expect": ["eval-test:zorblat"]},
    # Finds the other document only: a miss that is still answered.
    {"question": "How is the quimbly sprocket greased?", "expect": ["eval-test:zorblat"]},
    # Expected by title; nothing matches, so the question is abstained on.
    {"question": "xqzvor wublorpt frindlemax?", "expect": ["Zorblat flange calibration"]},
    # Off-topic by the set's say-so, but answered: counts as off-topic answered.
    {"question": "How is the zorblat flange calibrated?", "expect": []},
    {"question": "ploogretz vantaxiq?", "expect": []},
]


def test_metrics_on_a_small_set(gadgets: None, tmp_path: Path) -> None:
    path = write_set(tmp_path, "small.dev.jsonl", SMALL)
    output = evaluate(path, "--misses")
    on, hit1, hit5, mrr, abstain, off, off_answered, dup5 = row(output, str(path))
    assert (on, hit1, hit5, mrr, abstain) == ("3", "0.333", "0.333", "0.333", "0.333")
    assert (off, off_answered, dup5) == ("2", "0.500", "0.000")
    # The misses name the file and line, what was wanted and what came back.
    assert f"{path}:2  rank -  How is the quimbly sprocket greased?" in output
    assert "got:  eval-test:quimbly" in output
    assert f"{path}:3  rank -" in output and "(no answer)" in output
    assert f"{path}:4  rank -" in output
    assert f"{path}:1  " not in output and f"{path}:5  " not in output


def test_rows_per_file_per_split_and_all(gadgets: None, tmp_path: Path) -> None:
    dev = write_set(tmp_path, "a.dev.jsonl", SMALL[:1])
    test = write_set(tmp_path, "a.test.jsonl", SMALL[1:2] + SMALL[4:])
    output = evaluate(dev, test)
    assert row(output, "split dev")[:2] == ["1", "1.000"]
    assert row(output, "split test")[:2] == ["1", "0.000"]
    assert row(output, "all")[:3] == ["2", "0.500", "0.500"]


def test_floors_fail_the_command_with_the_reason(gadgets: None, tmp_path: Path) -> None:
    path = write_set(tmp_path, "small.jsonl", SMALL)
    evaluate(path, "--min-hit1", "0.3", "--min-hit5", "0.3", "--max-abstain", "0.34")
    with pytest.raises(CommandError, match=re.escape("hit@1 0.333 is under the floor 0.500")):
        evaluate(path, "--min-hit1", "0.5")
    with pytest.raises(CommandError) as caught:
        evaluate(path, "--min-hit5", "0.9", "--max-abstain", "0.2", "--max-offtopic", "0.4")
    message = str(caught.value)
    assert "hit@5 0.333 is under the floor 0.900" in message
    assert "on-topic abstention 0.333 is over the ceiling 0.200" in message
    assert "off-topic answered 0.500 is over the ceiling 0.400" in message


def test_floors_exit_non_zero_from_the_command_line(gadgets: None, tmp_path: Path) -> None:
    path = write_set(tmp_path, "small.jsonl", SMALL)
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "evaluate", str(path), "--min-hit1", "0.9"]).execute()
    assert exited.value.code == 1


@pytest.mark.parametrize("option", ["--min-hit1", "--min-hit5", "--max-abstain", "--max-offtopic"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.1", "1.5", "half", ""])
def test_floors_must_be_finite_numbers_from_0_to_1(tmp_path: Path, option: str, value: str) -> None:
    path = write_set(tmp_path, "ok.jsonl", [{"question": "What is a lambda?", "expect": []}])
    expected = f"argument {option}: must be a number from 0 to 1, not {value!r}"
    with pytest.raises(CommandError, match=re.escape(expected)):
        evaluate(path, f"{option}={value}")  # "=": argparse reads "-inf" alone as an option


def test_floors_given_as_keywords_are_checked_too(tmp_path: Path) -> None:
    path = write_set(tmp_path, "ok.jsonl", [{"question": "What is a lambda?", "expect": []}])
    with pytest.raises(
        CommandError, match=re.escape("--max-offtopic must be a number from 0 to 1")
    ):
        call_command("evaluate", str(path), max_offtopic=float("nan"), stdout=io.StringIO())


def test_floors_of_0_and_1_are_accepted(gadgets: None, tmp_path: Path) -> None:
    path = write_set(tmp_path, "small.jsonl", SMALL)
    evaluate(
        path, "--min-hit1", "0", "--min-hit5", "0", "--max-abstain", "1", "--max-offtopic", "1"
    )
    # A --max-offtopic of nan once never tripped; 0 does.
    with pytest.raises(
        CommandError, match=re.escape("off-topic answered 0.500 is over the ceiling 0.000")
    ):
        evaluate(path, "--max-offtopic", "0")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"question": "x", "expect": [}', "not valid JSON"),
        ('["a list"]', "expected an object"),
        ('{"expect": []}', "missing or empty 'question'"),
        ('{"question": "  ", "expect": []}', "missing or empty 'question'"),
        ('{"question": "What is a lambda?"}', "'expect' must be a list"),
        ('{"question": "What is a lambda?", "expect": "lambda"}', "'expect' must be a list"),
        (
            '{"question": "What is a lambda?", "expect": ["python-docs:nosuchtopic"]}',
            "no document has the title or source key 'python-docs:nosuchtopic'",
        ),
    ],
)
def test_bad_input_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = '{"question": "What is a lambda expression?", "expect": ["python-docs:lambda"]}'
    path = write_set(tmp_path, "bad.jsonl", [good, "", line])
    with pytest.raises(CommandError, match=re.escape(f"{path}:3: {message}")):
        evaluate(path)


# Lines no JSON parser turns into a value, each with what the error says about it.
UNREADABLE = [
    # Latin-1, not UTF-8: "é" is the single byte 0xe9.
    pytest.param(
        '{"question": "caf\xe9", "expect": []}'.encode("latin-1"), "not UTF-8", id="latin-1"
    ),
    # Deep enough to exhaust the parser's stack (RecursionError, not a JSONDecodeError).
    pytest.param(b"[" * 100_000, "not valid JSON (nested too deeply)", id="nested"),
    # Python refuses to convert integers this long (a ValueError, not a JSONDecodeError).
    pytest.param(
        b'{"question": "x", "expect": [], "n": ' + b"1" * 5000 + b"}",
        "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion)",
        id="long-integer",
    ),
]


@pytest.mark.parametrize(("line", "message"), UNREADABLE)
def test_an_unreadable_line_names_the_file_and_line(
    tmp_path: Path, line: bytes, message: str
) -> None:
    good = b'{"question": "What is a lambda expression?", "expect": ["python-docs:lambda"]}'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good + b"\n\n" + line + b"\n")
    with pytest.raises(CommandError, match=re.escape(f"{path}:3: {message}")):
        evaluate(path)


@pytest.mark.parametrize(("line", "message"), UNREADABLE)
def test_an_unreadable_support_label_names_the_line(
    tmp_path: Path, line: bytes, message: str
) -> None:
    good = b'{"claim": "x", "source": "python-docs:lambda", "supported": true}'
    path = tmp_path / "labels.jsonl"
    path.write_bytes(good + b"\n" + line + b"\n")
    with pytest.raises(CommandError, match=re.escape(f"{path}:2: {message}")):
        evaluate("--support-labels", path)


def test_not_utf8_says_where_the_bad_byte_is(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"question": "caf\xe9", "expect": []}\n'.encode("latin-1"))
    with pytest.raises(CommandError) as caught:
        evaluate(path)
    assert str(caught.value) == (
        f"{path}:1: not UTF-8 (byte 0xe9 at offset 17 of the file); save it as UTF-8"
    )


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    """Editors on Windows start UTF-8 files with one; ingest reads such files too."""
    path = tmp_path / "bom.jsonl"
    line = json.dumps({"question": "What is the capital of France?", "expect": []})
    path.write_bytes(codecs.BOM_UTF8 + line.encode() + b"\n")
    assert row(evaluate(path), str(path))[5] == "1"  # one off-topic question, read
    # A bad byte after it is still placed at the file's own offset.
    path.write_bytes(codecs.BOM_UTF8 + b'{"question": "caf\xe9", "expect": []}\n')
    with pytest.raises(CommandError) as caught:
        evaluate(path)
    assert str(caught.value) == (
        f"{path}:1: not UTF-8 (byte 0xe9 at offset 20 of the file); save it as UTF-8"
    )


# Characters str.splitlines() breaks lines on that JSON allows raw inside a string.
LINE_BREAKS_IN_STRINGS = ["\u2028", "\u2029", "\x85"]


def test_json_lines_split_on_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "breaks.jsonl"
    lines = [
        json.dumps({"question": f"What is yield{c}statement?", "expect": []}, ensure_ascii=False)
        for c in LINE_BREAKS_IN_STRINGS
    ]
    # Lines ended as on Windows (\r\n) too.
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8", newline="")
    assert row(evaluate(path), str(path))[5] == "3"  # off-topic questions, all read


def test_line_numbers_count_newlines_only(tmp_path: Path) -> None:
    path = tmp_path / "breaks.jsonl"
    good = [
        json.dumps({"question": f"What is yield{c}statement?", "expect": []}, ensure_ascii=False)
        for c in LINE_BREAKS_IN_STRINGS
    ]
    path.write_text("\r\n".join([*good, "{not json"]) + "\r\n", encoding="utf-8", newline="")
    with pytest.raises(CommandError, match=re.escape(f"{path}:4: not valid JSON")):
        evaluate(path)
    # The same count for a byte that is not UTF-8.
    path.write_bytes("\r\n".join(good).encode() + b"\r\n\xff\r\n")
    with pytest.raises(CommandError, match=re.escape(f"{path}:4: not UTF-8")):
        evaluate(path)


def test_support_labels_split_on_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    lines = [
        json.dumps(
            {
                "claim": f"Lambdas{c}run on the GPU",
                "source": "python-docs:lambda",
                "supported": False,
            },
            ensure_ascii=False,
        )
        for c in LINE_BREAKS_IN_STRINGS
    ]
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8", newline="")
    assert "support score vs 3 hand labels" in evaluate("--support-labels", path)


def test_a_missing_file_or_user_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read it"):
        evaluate(tmp_path / "missing.jsonl")
    path = write_set(tmp_path, "ok.jsonl", [{"question": "What is a lambda?", "expect": []}])
    with pytest.raises(CommandError, match="No user 'nobody'"):
        evaluate(path, "--user", "nobody")
    # Given empty (a variable not set): not the superuser who sees every document.
    with pytest.raises(CommandError, match="--user needs a name"):
        evaluate(path, "--user", "")


def test_user_option_applies_that_users_access(asker: object, tmp_path: Path) -> None:
    path = write_set(
        tmp_path,
        "vault.jsonl",
        [
            {
                "question": "Where does the Nightjar zeppelin launch from?",
                "expect": ["Project Nightjar launch plan"],
            }
        ],
    )
    # The default evaluation user sees every document, restricted ones included.
    assert row(evaluate(path), str(path))[1] == "1.000"
    # An asker outside the vault group gets no source: abstained.
    assert row(evaluate(path, "--user", "asker"), str(path))[4] == "1.000"


def test_shipped_test_split_holds_the_floors() -> None:
    """The CI floor (eval/floors.json): a ranking regression fails the build."""
    call_command(
        "ingest", str(ROOT / "eval/corpora/handbook"), "--no-progress", stdout=io.StringIO()
    )
    floors = json.loads((ROOT / "eval/floors.json").read_text(encoding="utf-8"))
    options = [
        item
        for key in ("min_hit1", "min_hit5", "max_abstain", "max_offtopic")
        for item in ("--" + key.replace("_", "-"), str(floors[key]))
    ]
    output = evaluate(*[ROOT / name for name in floors["files"]], *options)
    assert row(output, "all")[0] == "105"


def answers_row(output: str, name: str) -> list[str]:
    table = output.split("\nanswers ", 1)[1]
    return row(table, name)[-4:]


def test_answers_report_citation_quality_and_the_first_sentence(
    gadgets: None, tmp_path: Path
) -> None:
    path = write_set(tmp_path, "small.jsonl", SMALL)
    # The offline provider quotes its sources: every claim is supported by what it cites.
    n, recall, precision, first = answers_row(evaluate(path, "--answers"), str(path))
    # Two on-topic questions are answered (one abstains); the quimbly one cites quimbly.
    assert (n, recall, precision, first) == ("2", "1.000", "1.000", "0.500")


def test_a_model_that_cites_the_wrong_source_loses_citation_quality(
    gadgets: None, tmp_path: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    wrong = {"kind": "ok", "deltas": ["Quimbly sprockets want goose fat [1]."]}
    with serving(settings, wrong):
        path = write_set(tmp_path, "one.jsonl", SMALL[:1])  # retrieves zorblat only
        n, recall, precision, first = answers_row(evaluate(path, "--answers"), str(path))
    assert (n, recall, precision, first) == ("1", "0.000", "0.000", "1.000")


def test_support_labels_agreement_and_its_disagreements(tmp_path: Path) -> None:
    labels = write_set(
        tmp_path,
        "labels.jsonl",
        [
            {
                "claim": "Lambda expressions create anonymous functions",
                "source": "python-docs:lambda",
                "supported": True,
            },
            {"claim": "Lambdas run on the GPU", "source": "python-docs:lambda", "supported": False},
            # Labelled wrongly on purpose: the score disagrees, and the line is listed.
            {
                "claim": "Lambda expressions yield a function object",
                "source": "python-docs:lambda",
                "supported": False,
            },
        ],
    )
    output = evaluate("--support-labels", labels)
    assert "support score vs 3 hand labels" in output and "agreement 0.667" in output
    assert "flagged precision 1.000, flagged recall 0.500" in output
    assert "line 3: 1.00, labelled unsupported: Lambda expressions yield" in output
    assert "hit@1" not in output  # no question sets given: no retrieval table


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"claim": "x", "source": "python-docs:lambda"}', "expected {claim: str"),
        ('{"claim": "x", "source": "nope", "supported": true}', "no document 'nope'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_support_labels_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = write_set(tmp_path, "labels.jsonl", [line])
    with pytest.raises(CommandError, match=re.escape(f"{path}:1: {message}")):
        evaluate("--support-labels", path)
    with pytest.raises(CommandError, match="Give question sets, --support-labels FILE"):
        evaluate()


def test_dup5_counts_near_duplicates_in_the_first_five(
    gadgets: None, tmp_path: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    # The same page from another folder: with the rule off both take a place.
    ingest_text(
        "/srv/mirror/zorblat.md",
        "Zorblat flange calibration",
        "The zorblat flange is calibrated with a brass wrenchlet every spring. "
        "Calibrating the zorblat flange takes an hour.",
    )
    path = write_set(tmp_path, "dup.jsonl", SMALL[:2])
    settings.ANSWERS = {**settings.ANSWERS, "NEAR_DUPLICATE_SIMILARITY": 0}
    assert row(evaluate(path), str(path))[-1] == "0.500"
    settings.ANSWERS = {**settings.ANSWERS, "NEAR_DUPLICATE_SIMILARITY": 0.8}
    assert row(evaluate(path), str(path))[-1] == "0.000"


def test_save_and_compare_set_runs_side_by_side(gadgets: None, tmp_path: Path) -> None:
    path = write_set(tmp_path, "small.dev.jsonl", SMALL)
    saved = tmp_path / "before.json"
    evaluate(path, "--save", saved, "--label", "before")
    record = json.loads(saved.read_text(encoding="utf-8"))
    assert record["label"] == "before"
    assert record["rows"][0]["name"] == str(path) and record["rows"][0]["hit1"] == pytest.approx(
        1 / 3
    )

    output = evaluate(path, "--compare", saved, "--label", "after")
    table = output.split("\n\n", 1)[1].splitlines()
    assert table[1].split()[:3] == ["set", "before", "after"]
    # hit@1 before and after, hit@5 before and after, ...
    assert row("\n".join(table), str(path))[:4] == ["0.333", "0.333", "0.333", "0.333"]
    # The saved runs alone, without question sets.
    alone = evaluate("--compare", saved, "--compare", saved)
    assert row(alone, str(path))[:2] == ["0.333", "0.333"]


def save_refused(*args: object) -> str:
    """The message of the CommandError the command stops with, having printed nothing (no
    question ran)."""
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("evaluate", *[str(a) for a in args], stdout=out)
    assert out.getvalue() == ""
    return str(caught.value)


def test_save_path_is_checked_before_the_run(tmp_path: Path) -> None:
    path = write_set(tmp_path, "ok.jsonl", [{"question": "What is a lambda?", "expect": []}])
    missing = tmp_path / "missing" / "run.json"
    assert save_refused(path, "--save", missing) == (
        f"--save {missing}: the folder {missing.parent} does not exist."
    )
    assert save_refused(path, "--save", tmp_path) == f"--save {tmp_path}: it is a folder."
    under_a_file = path / "run.json"
    assert save_refused(path, "--save", under_a_file) == (
        f"--save {under_a_file}: {path} is not a folder."
    )
    # Nothing to save without question sets: refused rather than ignored.
    labels = write_set(
        tmp_path,
        "labels.jsonl",
        [{"claim": "x", "source": "python-docs:lambda", "supported": True}],
    )
    assert "--save needs question sets" in save_refused(
        "--support-labels", labels, "--save", tmp_path / "run.json"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to any folder")
def test_save_to_a_folder_that_is_not_writable_is_refused(tmp_path: Path) -> None:
    path = write_set(tmp_path, "ok.jsonl", [{"question": "What is a lambda?", "expect": []}])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert save_refused(path, "--save", locked / "run.json") == (
        f"--save {locked / 'run.json'}: the folder {locked} is not writable."
    )


def test_a_save_that_fails_at_the_end_is_an_error_after_the_floors(
    gadgets: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from answers.management.commands import evaluate as command

    path = write_set(tmp_path, "small.jsonl", SMALL)
    folder = tmp_path / "runs"
    folder.mkdir()
    saved = folder / "run.json"

    def run_then_remove_the_folder(**kwargs: Any) -> Any:
        results = evaluation_run(**kwargs)
        shutil.rmtree(folder)  # gone while the questions ran
        return results

    monkeypatch.setattr(command, "evaluation_run", run_then_remove_the_folder)
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(
            "evaluate", str(path), "--misses", "--min-hit1", "0.9", "--save", str(saved), stdout=out
        )
    assert str(caught.value).startswith(
        "Evaluation failed: hit@1 0.333 is under the floor 0.900. "
        f"The run was not saved to {saved} (No such file or directory"
    )
    # The table and the misses were printed all the same.
    assert row(out.getvalue(), str(path))[:2] == ["3", "0.333"]
    assert "misses (on-topic not first" in out.getvalue()

    # Floors that hold say so.
    folder.mkdir()
    with pytest.raises(CommandError) as caught:
        evaluate(path, "--min-hit1", "0.3", "--save", saved)
    assert str(caught.value).startswith(f"The floors held, but the run was not saved to {saved} (")


def test_a_failed_save_leaves_no_half_written_file(
    gadgets: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_set(tmp_path, "small.jsonl", SMALL)
    folder = tmp_path / "runs"
    folder.mkdir()
    saved = folder / "run.json"
    saved.write_text("the earlier run\n", encoding="utf-8")
    replace = os.replace

    def full_disk(source: Any, target: Any) -> None:
        if Path(target).parent == folder:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        replace(source, target)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(CommandError, match=re.escape(f"not saved to {saved} (No space left")):
        evaluate(path, "--save", saved)
    # The earlier run is whole, and no temporary file is left beside it.
    assert saved.read_text(encoding="utf-8") == "the earlier run\n"
    assert [p.name for p in folder.iterdir()] == ["run.json"]


def test_compare_refuses_a_file_that_is_not_a_saved_run(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CommandError, match="not a run saved by --save"):
        evaluate("--compare", path)
    with pytest.raises(CommandError, match=re.escape(f"{tmp_path / 'gone.json'}: cannot read it")):
        evaluate("--compare", tmp_path / "gone.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"label": "x", "rows": [{"name": "all", "hit1": "bad"}]}', "rows[0].hit1 must be"),
        ('{"label": "x", "rows": [{"name": "all", "hit1": [1]}]}', "rows[0].hit1 must be"),
        (
            '{"label": "x", "rows": [{"name": "all", "hit1": "' + "x" * 1000 + '"}]}',
            "or null, not '" + "x" * 36 + "...)",
        ),
        ('{"label": "x", "rows": [{"name": "all", "mrr": true}]}', "rows[0].mrr must be"),
        ('{"label": "x", "rows": [{"name": "all", "dup5": NaN}]}', "rows[0].dup5 must be"),
        ('{"label": "x", "rows": [{"name": "all", "hit5": Infinity}]}', "rows[0].hit5 must be"),
        ('{"label": "x", "rows": [{"name": "all", "abstain": 1.5}]}', "rows[0].abstain must be"),
        ('{"label": "x", "rows": [{"name": "a"}, {"name": "b", "offtopic": -1}]}', "rows[1]"),
        ('{"label": "x", "rows": []}', "rows is empty"),
        ('{"label": "x", "rows": {"name": "all"}}', "rows must be a list"),
        ('{"label": "x", "rows": [["all"]]}', "rows[0] must be an object"),
        ('{"label": "x", "rows": [{"hit1": 0.5}]}', "rows[0].name must be a string"),
        ('{"label": "x", "rows": [{"name": "a"}, {"name": "a"}]}', "rows[1].name 'a' repeats"),
        ('{"label": ["x"], "rows": [{"name": "all"}]}', "label must be a string"),
        ('{"rows": [{"name": "all"}]}', "label must be a string"),
        ('{"label": "x", "rows": [{"name": "all", "hit1": 1' + "1" * 5000 + "}]}", "not JSON"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_compare_refuses_a_saved_run_with_bad_figures(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(
        CommandError, match=re.escape(f"{path}: not a run saved by --save (")
    ) as caught:
        evaluate("--compare", path)
    assert message in str(caught.value)
