from __future__ import annotations

import codecs
import io
import itertools
import os
import re
import shutil
import time
import tracemalloc
import zipfile
from pathlib import Path

import lxml.etree
import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from answers import ingestion
from answers.ingestion import (
    SUPPORTED_SUFFIXES,
    ChunkSpan,
    ExtractedDocument,
    ExtractionError,
    SkippedFile,
    chunk_text,
    content_hash,
    extract_file,
    extract_text,
    iter_source_files,
    scan_source_files,
)
from tests import documents
from tests.helpers import write


def make_pdf(pages: list[str], *, title: str | None = None) -> bytes:
    """A hand-written PDF with one Helvetica text line per page and a correct xref table."""
    count = len(pages)
    page_ids = [4 + 2 * i for i in range(count)]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % i for i in page_ids), count),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, text in zip(page_ids, pages, strict=True):
        content = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1") if text else b""
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % (page_id + 1)
        )
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)
    info_id = 4 + 2 * count
    if title is not None:
        objects[info_id] = b"<< /Title (%s) >>" % title.encode("latin-1")

    out = b"%PDF-1.4\n"
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    info = b" /Info %d 0 R" % info_id if title is not None else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (size, info)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return out


# ----------------------------------------------------------------------- text files


def test_markdown_atx_title_and_markup_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "guide.md", "Intro line\n\n# The Guide #\n\nSome *text*.\n")
    doc = extract_file(path)
    assert doc == ExtractedDocument(
        title="The Guide", body="Intro line\n\n# The Guide #\n\nSome *text*."
    )


def test_markdown_setext_title(tmp_path: Path) -> None:
    doc = extract_file(write(tmp_path / "a.markdown", "My Title\n========\n\nBody."))
    assert doc.title == "My Title"


@pytest.mark.parametrize(
    ("data", "suffix", "title"),
    [
        pytest.param(b"## Second\n\n# First\n", ".md", "First", id="md-level-one-first"),
        pytest.param(b"Para\n\n## Only level two\n\nMore", ".md", "Only level two", id="md-any"),
        pytest.param(b"```bash\n# not a title\n```\n\n# Real\n", ".md", "Real", id="md-fences"),
        pytest.param(
            b".. _label:\n\nSection One\n===========\n\nText.\n", ".rst", "Section One",
            id="rst-underline",
        ),
        pytest.param(
            b"#########\n  Overlined\n#########\n\nSub\n---\n", ".rst", "Overlined",
            id="rst-overline",
        ),
        pytest.param(b"A long title\n==\n\nText\n", ".rst", "f", id="rst-underline-too-short"),
    ],
)  # fmt: skip
def test_titles_from_headings(data: bytes, suffix: str, title: str) -> None:
    """Markdown: the first level-one heading, else any (none in code fences); reST: the
    first section title whose adornment is long enough; else the fallback."""
    assert extract_text(data=data, suffix=suffix, fallback_title="f").title == title


def test_markdown_title_uses_front_matter() -> None:
    front = b"---\ntitle: 'From YAML'\ntags: [a]\n---\n\n# Heading\n"
    doc = extract_text(data=front, suffix=".md", fallback_title="f")
    assert doc.title == "From YAML"
    # The rest of the front matter is the site generator's: not searched, not quoted.
    assert doc.body == "# Heading"


@pytest.mark.parametrize(
    "text",
    [
        "---\nA rule, then a paragraph\n---\n\nMore text.\n",  # a rule and a setext heading
        "---\ntitle: Only front matter\n---\n",  # nothing else: kept, not empty
        "---\ntitle: never closed\n\nText.\n",
    ],
)
def test_markdown_that_is_not_front_matter_stays_as_written(text: str) -> None:
    doc = extract_text(data=text.encode(), suffix=".md", fallback_title="f")
    assert doc.body == text.rstrip("\n")


def test_markdown_front_matter_of_any_yaml_shape_is_left_out() -> None:
    front = (
        '---\ntitle: "Onboarding handbook"\ntags:\n  - hr\n  - onboarding\n# a comment\n'
        "summary: >\n  New staff read this first.\nmeta.date: 2026-01-05\n...\n\nWelcome aboard.\n"
    )
    doc = extract_text(data=front.encode(), suffix=".markdown", fallback_title="f")
    assert (doc.title, doc.body) == ("Onboarding handbook", "Welcome aboard.")


def test_markdown_without_heading_uses_fallback(tmp_path: Path) -> None:
    doc = extract_file(write(tmp_path / "release-notes.md", "#hashtag is not a heading\n"))
    assert doc.title == "release-notes"


def test_txt_normalization(tmp_path: Path) -> None:
    raw = b"\xef\xbb\xbfTitle?\r\nline two   \r\n\r\n\r\n\r\n\r\n\r\nend\t \r"
    doc = extract_file(write(tmp_path / "notes.TXT", raw))
    assert doc.title == "notes"
    assert doc.body == "Title?\nline two\n\n\nend"


def test_invalid_utf8(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError, match="not valid UTF-8"):
        extract_file(write(tmp_path / "bad.txt", b"caf\xe9 au lait"))


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_text_with_a_unicode_byte_order_mark_is_read_in_that_encoding(codec: str) -> None:
    # Windows Notepad's "Unicode": UTF-16 with its BOM, which declares the encoding as
    # surely as HTML's does (which was followed). It was refused as "not valid UTF-8".
    text = "# Caf\u00e9 notes\r\n\r\nThe caf\u00e9 opens at nine; \u4e2d\u6587 too.\r\n"
    data = text.encode(codec)
    if codec == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    doc = extract_text(data=data, suffix=".md", fallback_title="f")
    assert doc.title == "Caf\u00e9 notes"
    assert doc.body == "# Caf\u00e9 notes\n\nThe caf\u00e9 opens at nine; \u4e2d\u6587 too."


def test_utf16_with_a_bom_that_is_not_utf16_is_a_clear_error() -> None:
    with pytest.raises(ExtractionError, match=r"^not valid UTF-16 \(it starts with its byte"):
        extract_text(data=codecs.BOM_UTF16_LE + b"ab\x00\xdc", suffix=".txt", fallback_title="f")


@pytest.mark.parametrize("suffix", [".html", ".htm"])
def test_a_binary_file_named_html_is_refused_not_stored_as_garbage(suffix: str) -> None:
    # A PNG, a zip or a PDF renamed .html: decoded with replacement characters it was
    # stored as a document of noise.
    pdf = documents.pdf_bytes(title="x", lines=[f"Line {n} of a report." for n in range(300)])
    for data in (pdf, documents.docx_bytes(title="t", heading="h", paragraphs=["p"])):
        with pytest.raises(ExtractionError, match=r"^not an HTML text file: \d+% of its bytes"):
            extract_text(data=data, suffix=suffix, fallback_title="f")


def test_html_with_a_few_stray_control_bytes_is_still_read() -> None:
    page = b"<p>caf\xe9 " + b"word " * 100 + b"\x01\x02</p>"
    assert extract_text(data=page, suffix=".html", fallback_title="f").body.startswith("caf")


@pytest.mark.parametrize("suffix", [".md", ".txt", ".rst", ".html", ".pdf"])
@pytest.mark.parametrize("content", [b"", b"  \n\t\r\n", b"\x0b\x0c "])
def test_empty_file(tmp_path: Path, suffix: str, content: bytes) -> None:
    with pytest.raises(ExtractionError, match="file is empty"):
        extract_file(write(tmp_path / f"empty{suffix}", content))


def test_bom_only_file_is_empty() -> None:
    with pytest.raises(ExtractionError, match="file is empty"):
        extract_text(data=b"\xef\xbb\xbf\n", suffix=".md", fallback_title="f")


def test_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError, match=r"unsupported file type \.gz"):
        extract_file(write(tmp_path / "report.gz", b"\x1f\x8b\x08"))
    with pytest.raises(ExtractionError, match="unsupported file type"):
        extract_text(data=b"x", suffix="", fallback_title="f")


def test_suffix_is_case_insensitive_and_dot_optional() -> None:
    doc = extract_text(data=b"# T\n", suffix="MD", fallback_title="f")
    assert doc.title == "T"


def test_too_large_file_is_rejected_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.txt"
    with path.open("wb") as handle:
        handle.truncate(ingestion.MAX_FILE_BYTES + 1)  # sparse: cheap to create
    with pytest.raises(ExtractionError, match="too large"):
        extract_file(path)


def test_a_file_that_grew_after_its_size_was_read_is_read_whole_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    path = write(tmp_path / "growing.txt", b"# Grew\n" + b"word " * 100)
    real_stat = Path.stat

    def stale_stat(self: Path, **kwargs: object) -> os.stat_result:
        found = real_stat(self, **kwargs)  # type: ignore[arg-type]
        if self != path:
            return found
        return os.stat_result((found.st_mode, 0, 0, 0, 0, 0, 10, 0, 0, 0))  # 10 bytes then

    monkeypatch.setattr(Path, "stat", stale_stat)
    assert extract_file(path).body.count("word") == 100
    monkeypatch.setattr(ingestion, "MAX_FILE_BYTES", 100)
    with pytest.raises(ExtractionError, match="too large"):
        extract_file(path)


def test_too_large_data_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingestion, "MAX_FILE_BYTES", 10)
    with pytest.raises(ExtractionError, match="too large"):
        extract_text(data=b"x" * 11, suffix=".txt", fallback_title="f")


def test_unreadable_file_is_an_extraction_error(tmp_path: Path) -> None:
    (tmp_path / "folder.md").mkdir()
    with pytest.raises(ExtractionError, match="not a regular file"):
        extract_file(tmp_path / "folder.md")
    with pytest.raises(ExtractionError, match="cannot read file: No such file"):
        extract_file(tmp_path / "deleted.md")


def test_nul_bytes_are_rejected_in_text_files() -> None:
    with pytest.raises(ExtractionError, match="NUL"):
        extract_text(data="hi".encode("utf-16-le"), suffix=".txt", fallback_title="f")


def test_long_titles_are_truncated() -> None:
    doc = extract_text(data=b"# " + b"word " * 100, suffix=".md", fallback_title="f")
    assert len(doc.title) == ingestion.MAX_TITLE_LENGTH
    assert doc.title.endswith("\u2026")


# ---------------------------------------------------------------------------- HTML

HTML = b"""<!doctype html>
<html><head><title> The  Page </title><style>p { color: red }</style>
<script>var secret = "do not index";</script></head>
<body>
<!-- a comment -->
<noscript>Enable JS</noscript>
<h1>Heading</h1>
<p>First <b>bold</b> paragraph
spanning lines.</p><div>Second&nbsp;block &amp; more</div>
<ul><li>one</li><li>two</li></ul>
<p>line<br>break</p>
<table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr></table>
<pre>  indented
    code</pre>
<template><p>template text</p></template>
<p hidden>hidden text</p>
<script>alert("x")</script>
</body></html>"""


def test_html_extraction(tmp_path: Path) -> None:
    doc = extract_file(write(tmp_path / "page.html", HTML))
    assert doc.title == "The Page"
    assert doc.body == (
        "# Heading\n\nFirst **bold** paragraph spanning lines.\n\nSecond block & more\n\n"
        "one\n\ntwo\n\nline\nbreak\n\nA | B\n\n1 | 2\n\n```\n  indented\n    code\n```"
    )
    for dropped in ("secret", "alert", "color", "comment", "Enable JS", "template", "hidden"):
        assert dropped not in doc.body
    assert "<" not in doc.body


def test_html_title_falls_back_to_h1_then_file_name(tmp_path: Path) -> None:
    doc = extract_file(write(tmp_path / "x.htm", "<body><h1>Main <i>Title</i></h1><p>t</p>"))
    assert doc.title == "Main Title"
    doc = extract_file(write(tmp_path / "plain.htm", "<p>only text</p>"))
    assert (doc.title, doc.body) == ("plain", "only text")


_TITLE_PLACES = st.lists(
    st.sampled_from(
        [
            "<title>{}</title>",
            "<title> </title>",
            "<svg><title>{}</title></svg>",
            "<div><title>{}</title></div>",
            "<p>text</p>",
        ]
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(head=_TITLE_PLACES, body=_TITLE_PLACES)
def test_html_title_is_the_first_usable_title_in_document_order(
    head: list[str], body: list[str]
) -> None:
    """The head's titles are looked up without walking the body (a fast path): the title
    found is the one a walk of the whole page in document order finds."""
    parts = [part.format(f"T{i}") for i, part in enumerate(head + body)]
    page = (
        f"<html><head>{''.join(parts[: len(head)])}</head>"
        f"<body>{''.join(parts[len(head) :])}<p>content</p></body></html>"
    )
    root = lxml.etree.fromstring(page, parser=ingestion._HTML_PARSER)
    assert list(ingestion._titles_in_order(root)) == list(root.iter("title"))
    expected = next(
        (
            " ".join("".join(t.itertext()).split())
            for t in root.iter("title")
            if not any(parent.tag == "svg" for parent in t.iterancestors())
            and "".join(t.itertext()).strip()
        ),
        "page",
    )
    assert extract_text(data=page.encode(), suffix=".html", fallback_title="page").title == (
        expected
    )


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(categories=("L", "N", "P", "Z", "Cc", "Cs"))))
def test_sanitize_drops_nuls_and_replaces_lone_surrogates(text: str) -> None:
    expected = re.sub("[\ud800-\udfff]", "\ufffd", text.replace("\x00", ""))
    assert ingestion._sanitize(text) == expected
    ingestion._sanitize(text).encode("utf-8")  # always encodable


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40))
def test_printable_text_without_double_spaces_has_no_whitespace_to_collapse(
    text: str,
) -> None:
    """The HTML walk skips collapsing whitespace in such text nodes: exact only if every
    whitespace character but the ASCII space is non-printable."""
    if text.isprintable() and "  " not in text:
        assert re.sub(r"\s+", " ", text) == text


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.one_of(
            st.sampled_from([chr(c) for c in range(0x3001) if chr(c).isspace()]),
            st.characters(exclude_categories=("Cs",)),
        ),
        max_size=30,
    )
)
def test_whitespace_collapses_as_the_regular_expression_does(text: str) -> None:
    assert ingestion._collapse_whitespace(text) == re.sub(r"\s+", " ", text)


def test_html_text_nodes_collapse_every_kind_of_whitespace() -> None:
    page = "<p>a\u00a0\u00a0b\tc\u3000d  e\u2028f\x0bg <code>x\u00a0 y</code></p>".encode()
    assert extract_text(data=page, suffix=".html", fallback_title="f").body == "a b c d e f g `x y`"


def test_html_declared_charset() -> None:
    data = b'<meta charset="windows-1252"><p>caf\xe9 \x93quoted\x94</p>'
    doc = extract_text(data=data, suffix=".html", fallback_title="f")
    assert doc.body == "caf\u00e9 \u201cquoted\u201d"
    latin1 = b'<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><p>\xe9</p>'
    assert extract_text(data=latin1, suffix=".html", fallback_title="f").body == "\u00e9"


@pytest.mark.parametrize(
    "label",
    ["base64", "undefined", "punycode", "idna", "utf-7", "unicode_escape", "cp037", "cp437"],
)
def test_html_charset_labels_no_browser_accepts_read_as_utf8(label: str) -> None:
    # Python codecs, but none of the HTML standard's encodings: read as an unknown label is.
    page = '<meta charset="{}"><title>Caf\u00e9</title><p>Caf\u00e9 +AGEA- \\u0041</p>'
    unknown = extract_text(data=page.format("foo").encode(), suffix=".html", fallback_title="f")
    assert unknown.body == "Caf\u00e9 +AGEA- \\u0041"
    doc = extract_text(data=page.format(label).encode(), suffix=".html", fallback_title="f")
    assert doc == unknown


@pytest.mark.parametrize(
    ("label", "data", "text"),
    [
        ("windows-1251", b"\xcf\xf0\xe8", "\u041f\u0440\u0438"),
        ("koi8-r", b"\xf0\xd2\xc9", "\u041f\u0440\u0438"),
        ("shift_jis", "\u65e5\u672c".encode("shift_jis"), "\u65e5\u672c"),
        # The standard reads these labels as a superset: GB2312 as GBK, Latin-5 as 1254.
        ("gb2312", "\u4e2d\u6587".encode("gbk"), "\u4e2d\u6587"),
        ("iso-8859-9", b"\x80", "\u20ac"),
        # Shift_JIS and EUC-KR with the Windows extensions browsers decode them with.
        ("shift_jis", "\u2460\u65e5".encode("cp932"), "\u2460\u65e5"),
        ("euc-kr", "\uac02\ub620".encode("cp949"), "\uac02\ub620"),
        # The standard's labels that Python's codecs do not know.
        ("Windows-31J", "\u2460".encode("cp932"), "\u2460"),
        ("windows-949", "\uac02".encode("cp949"), "\uac02"),
        ("x-mac-cyrillic", "\u041f".encode("mac-cyrillic"), "\u041f"),
        ("iso-8859-8-i", "\u05e9".encode("iso-8859-8"), "\u05e9"),
        ("x-gbk", "\u4e2d".encode("gbk"), "\u4e2d"),
    ],
)
def test_html_charset_labels_of_the_standard_are_honoured(
    label: str, data: bytes, text: str
) -> None:
    page = b'<meta charset="' + label.encode() + b'"><p>' + data + b"</p>"
    assert extract_text(data=page, suffix=".html", fallback_title="f").body == text


def test_html_decoders_are_ascii_compatible_text_encodings() -> None:
    # What lets a <meta> be read before the encoding is known; UTF-16 and the rest are not.
    ascii_bytes = bytes(range(128))
    for name in set(ingestion._HTML_DECODERS.values()):
        codec = codecs.lookup(name)
        assert codec._is_text_encoding, name  # type: ignore[attr-defined]
        assert ascii_bytes.decode(name) == ascii_bytes.decode("ascii"), name


def test_html_invalid_utf8_is_replaced_not_rejected() -> None:
    doc = extract_text(data=b"<p>caf\xe9</p>", suffix=".html", fallback_title="f")
    assert doc.body == "caf\ufffd"


def test_xhtml_with_xml_declaration() -> None:
    data = b'<?xml version="1.0" encoding="UTF-8"?>\n<html><body><p>caf\xc3\xa9</p></body></html>'
    assert extract_text(data=data, suffix=".html", fallback_title="f").body == "caf\u00e9"


def test_html_without_text() -> None:
    with pytest.raises(ExtractionError, match="no readable text"):
        extract_text(data=b"<script>x()</script><p> </p>", suffix=".html", fallback_title="f")


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])  # parsed as bytes; as text
def test_html_nested_hundreds_of_levels_deep_keeps_all_its_text(encoding: str) -> None:
    # Unclosed <div>s or <font>s repeated down a generated page: past 255 levels libxml2
    # stopped parsing, and the page was stored cut off there (or refused as empty).
    depth = 600
    page = (
        f'<html><head><meta charset="{encoding}"></head><body><p>Before the nest, caf\u00e9.</p>'
        + "<div>" * depth + "<p>Deep inside.</p>"
        + "</div>" * depth + "<p>After the nest.</p></body></html>"
    )  # fmt: skip
    doc = extract_text(data=page.encode(encoding), suffix=".html", fallback_title="f")
    assert doc.body == "Before the nest, caf\u00e9.\n\nDeep inside.\n\nAfter the nest."


def test_html_text_over_ten_megabytes_in_one_element_is_kept_whole() -> None:
    words = "wombat " * 1_600_000  # 11.2 MB in one text node: libxml2's default limit is 10
    page = f"<html><body><p>{words}</p><p>The end.</p></body></html>".encode()
    doc = extract_text(data=page, suffix=".html", fallback_title="f")
    assert doc.body == words.strip() + "\n\nThe end."


def test_html_nested_deeper_than_the_parser_reads_is_an_error_not_a_cut_document() -> None:
    depth = 5000
    page = "<p>Before.</p>" + "<div>" * depth + "<p>Deep.</p>" + "</div>" * depth
    with pytest.raises(ExtractionError, match=r"^HTML is nested more than 2,048 elements deep"):
        extract_text(data=page.encode(), suffix=".html", fallback_title="f")


# ----------------------------------------------------------------------------- PDF


def test_pdf_text_and_metadata_title(tmp_path: Path) -> None:
    path = write(tmp_path / "doc.pdf", make_pdf(["Hello PDF world", "Page two"], title="Meta"))
    doc = extract_file(path)
    assert doc.title == "Meta"
    assert doc.body == "Hello PDF world\n\nPage two"


def test_pdf_without_title_uses_fallback(tmp_path: Path) -> None:
    # No /Title: the first line (a title page's) is the title, unless it is a long sentence.
    doc = extract_file(write(tmp_path / "untitled.pdf", make_pdf(["Hello PDF world"])))
    assert (doc.title, doc.body) == ("Hello PDF world", "Hello PDF world")
    doc = extract_file(write(tmp_path / "untitled.pdf", make_pdf(["word " * 40])))
    assert doc.title == "untitled"
    doc = extract_file(write(tmp_path / "blank.pdf", make_pdf(["Text"], title="   ")))
    assert doc.title == "Text"


def test_pdf_without_text(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError, match="PDF has no extractable text"):
        extract_file(write(tmp_path / "scan.pdf", make_pdf([""])))


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.4\nthis is not really a pdf", b"not a pdf at all", make_pdf(["Hi"])[:60]],
)
def test_corrupt_pdf(data: bytes) -> None:
    with pytest.raises(ExtractionError, match="not a readable PDF"):
        extract_text(data=data, suffix=".pdf", fallback_title="f")


def _encrypted(user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf(["Secret text"]))))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_password_protected_pdf() -> None:
    with pytest.raises(ExtractionError, match="password-protected"):
        extract_text(data=_encrypted("secret"), suffix=".pdf", fallback_title="f")


def test_pdf_encrypted_with_empty_user_password_is_read() -> None:
    doc = extract_text(data=_encrypted(""), suffix=".pdf", fallback_title="f")
    assert doc.body == "Secret text"


# -------------------------------------------------------- main content and titles


def test_html_site_navigation_is_dropped() -> None:
    doc = extract_text(data=documents.TEXINFO_HTML.encode(), suffix=".html", fallback_title="f")
    assert doc.title == "Closure Example (mylib manual)"
    assert doc.body.startswith("### 2.6 Closure Example\n\nA trivial example that binds `fputs`")
    # The navigation bar and the in-page menu are Texinfo's chrome.
    assert "Next:" not in doc.body and "Index" not in doc.body and "Arrays" not in doc.body
    doc = extract_text(data=documents.SITE_HTML.encode(), suffix=".html", fallback_title="f")
    # The article's own <header> holds its heading: kept; the page's header, nav, aside and
    # footer are not content.
    assert doc.body == "# How refunds work\n\nRefunds reach the card within five days."


def test_html_landmarks_and_generator_navigation() -> None:
    page = (
        '<body><div role="navigation">Menu</div><div class="related">Sphinx bar</div>'
        '<div class="navheader">DocBook bar</div><section><header><h2>Kept</h2></header>'
        "<p>Text</p><footer>Section footer kept</footer></section>"
        '<div class="sphinxsidebar">Search box</div><div role="contentinfo">Legal</div></body>'
    )
    assert html_body(page) == "## Kept\n\nText\n\nSection footer kept"


def html_body(page: str) -> str:
    return extract_text(data=page.encode(), suffix=".html", fallback_title="f").body


def test_html_two_mains_fall_back_to_the_page_less_chrome() -> None:
    page = "<nav>Menu</nav><article><p>One</p></article><article><p>Two</p></article>"
    assert html_body(page) == "One\n\nTwo"


def test_html_asides_in_the_main_content_are_the_pages_own() -> None:
    # docutils renders a reST sidebar, a topic and each footnote as <aside>: inside the main
    # element they are content; around it, and on a page without one, they are the site's.
    page = (
        "<body><aside>Site links</aside><main><p>Text</p><aside class='sidebar'>"
        "<p class='sidebar-title'>Hello</p><p>Side note</p></aside>"
        "<div class='prev-next-area'>previous</div></main><div class='sidebar'>Menu</div></body>"
    )
    assert html_body(page) == "Text\n\nHello\n\nSide note"
    page = "<body><p>Text</p><aside>Site links</aside><div class='sidebar'>Menu</div></body>"
    assert html_body(page) == "Text"


def test_html_sphinx_permalinks_and_source_links_are_dropped() -> None:
    page = (
        '<div role="main"><h1>Title<a class="headerlink" href="#t">\u00b6</a></h1>'
        '<dt>f(x)<a class="reference external" href="s.py"><span class="viewcode-link">'
        '<span class="pre">[source]</span></span></a></dt></div>'
    )
    assert html_body(page) == "# Title\n\nf(x)"


# Real pages of five documentation sites (tests/data/real_sites/README.md): each site's
# chrome, as this test reads it from the page itself (the elements every page of the site
# repeats around its content), and sentences of the content, some inside blocks that look
# like chrome (admonitions, footnotes, a reST sidebar).
REAL_SITES = Path(__file__).parent / "data" / "real_sites"
PYDATA_CHROME = (
    "//nav | //footer | //*[contains(@class, 'bd-sidebar') or contains(@class, 'bd-toc')"
    " or contains(@class, 'prev-next-area')] | //*[contains(@class, 'headerlink')]"
    " | //*[contains(@class, 'viewcode-link')]"
)
SITE_CHROME = {
    "django": "//*[@id='hd' or @id='ft' or @id='sidebar'] | //*[contains(@class, 'headerlink')]"
    " | //*[contains(@class, 'viewcode-back')]",
    "postgresql": "//*[@class='navheader' or @class='navfooter' or @class='toc']",
    "pandas": PYDATA_CHROME,
    "scipy": PYDATA_CHROME,
    "python": "//*[@class='related' or @class='sphinxsidebar' or @class='footer']"
    " | //*[contains(@class, 'headerlink')]",
}
REAL_PAGES = {
    "django/ref/contrib/postgres/validators.html": [
        "Validates that the upper bound of the range is not greater than `limit_value`.",
        "Note\n\nNote that this checks only for the existence of a given key",
    ],
    "django/_modules/django/urls/exceptions.html": ["class NoReverseMatch(Exception):"],
    "postgresql/tutorial-select.html": [
        "SELECT city, temp_lo, temp_hi, prcp, date FROM weather;",
        "[2] While `SELECT *` is useful for off-the-cuff queries",
    ],
    "postgresql/tutorial-start.html": ["## Chapter 1. Getting Started"],
    "postgresql/sql-droptable.html": [
        "DROP TABLE \u2014 remove a table",
        "Refuse to drop the table if any objects depend on it.",
    ],
    "pandas/reference/api/pandas.DataFrame.index.html": [
        "# pandas.DataFrame.index\n\nDataFrame.index\n\nThe index (row labels) of the DataFrame."
    ],
    "pandas/reference/api/pandas.option_context.__call__.html": ["Call self as a function."],
    "scipy/reference/generated/scipy.signal.welch.html": [
        "Estimate power spectral density using Welch\u2019s method.",
        "Lomb-Scargle periodogram for unevenly sampled data",
        "New in version 0.12.0.",
        "Biometrika, vol. 37, pp. 1-16, 1950.",
    ],
    "python/library/asyncio.html": ["Hello World!\n\n```\nimport asyncio\n"],
    "python/tutorial/whatnow.html": ["\u201cCheese Shop\u201d is a Monty Python\u2019s sketch"],
}


def site_chrome_texts(path: Path, site: str) -> set[str]:
    """The texts of the page's chrome that its content does not also hold (a sidebar's
    table of contents repeats the page's own headings; those are content)."""
    root = lxml.etree.parse(str(path), lxml.etree.HTMLParser()).getroot()
    chrome = root.xpath(SITE_CHROME[site])
    texts = {
        " ".join("".join(element.itertext()).split())
        for container in chrome
        for element in container.iter("a", "p", "li", "h3", "h4", "td", "th", "span")
    }
    for container in chrome:
        if container.getparent() is not None:
            container.getparent().remove(container)
    content = " ".join("".join(next(root.iter("body")).itertext()).split())
    return {text for text in texts if len(text) > 2 and text not in content}


@pytest.mark.parametrize("page", sorted(REAL_PAGES))
def test_real_pages_chunks_hold_content_and_no_site_chrome(page: str) -> None:
    path = REAL_SITES / page
    chunks = [span.text for span in chunk_text(extract_file(path).body)]
    text = "\n\n".join(chunks)
    for sentence in REAL_PAGES[page]:
        assert sentence in text
    chrome = site_chrome_texts(path, page.split("/")[0])
    assert chrome  # the test found the site's chrome on this page
    for chunk in chunks:
        assert not [words for words in chrome if words in chunk]
        lines = {line.strip() for line in chunk.split("\n")}
        assert not lines & {"previous", "next", "up", "Prev", "Next", "Home", "On this page"}
        for mark in ("\u00b6", "[source]", "[docs]", "Table of Contents", "Last update"):
            assert mark not in chunk


def test_pdf_font_change_between_letter_and_capital_is_a_word_break() -> None:
    doc = extract_text(data=documents.pdf_mixed_fonts_bytes(), suffix=".pdf", fallback_title="f")
    assert doc.body == "GNOME The GNOME desktop\nJavaScript and McDonald stay whole."


def test_pdf_from_a_real_generator() -> None:
    data = documents.pdf_bytes(title="Field guide", lines=["Quokkas smile.", "Numbats dig."])
    doc = extract_text(data=data, suffix=".pdf", fallback_title="f")
    assert (doc.title, doc.body) == ("Field guide", "Quokkas smile.\nNumbats dig.")


def test_aes_encrypted_pdf() -> None:
    locked = documents.encrypted_pdf_bytes(user_password="secret")
    with pytest.raises(ExtractionError, match=r"^PDF is password-protected$"):
        extract_text(data=locked, suffix=".pdf", fallback_title="f")
    opened = documents.encrypted_pdf_bytes(user_password="")
    assert extract_text(data=opened, suffix=".pdf", fallback_title="f").body == "Secret"


def test_docx_title_from_properties_then_first_heading() -> None:
    data = documents.docx_bytes(title="Q3 report", heading="Review", paragraphs=["Kumquats."])
    doc = extract_text(data=data, suffix=".docx", fallback_title="f")
    assert doc == ExtractedDocument(
        title="Q3 report", body="Review\n\nKumquats.\n\ncell one | cell two"
    )
    data = documents.docx_bytes(title=None, heading="Review", paragraphs=["Kumquats."])
    assert extract_text(data=data, suffix=".docx", fallback_title="f").title == "Review"


def test_pptx_and_xlsx() -> None:
    deck = documents.pptx_bytes(slide_title="Roadmap", text="Ship it")
    assert extract_text(data=deck, suffix=".pptx", fallback_title="f") == ExtractedDocument(
        title="Roadmap", body="Roadmap\n\nShip it"
    )
    book = documents.xlsx_bytes(title="Budget", rows=[["item", "cost"], ["food", 12.5], [None]])
    assert extract_text(data=book, suffix=".xlsx", fallback_title="f") == ExtractedDocument(
        title="Budget", body="Figures\nitem | cost\nfood | 12.5"
    )


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx"])
def test_damaged_office_files_have_a_one_line_reason(suffix: str) -> None:
    good = documents.docx_bytes(title=None, heading="H", paragraphs=["p"])
    for data in (b"PK\x03\x04 not a zip", good[: len(good) // 2]):
        with pytest.raises(ExtractionError, match=rf"^not a readable \{suffix} file \(") as info:
            extract_text(data=data, suffix=suffix, fallback_title="f")
        assert "\n" not in str(info.value)


_OFFICE_SAMPLES = {
    ".docx": (lambda: documents.docx_bytes(title=None, heading="H", paragraphs=["p"]), "word"),
    ".pptx": (lambda: documents.pptx_bytes(slide_title="Roadmap", text="Ship it"), "ppt"),
    ".xlsx": (lambda: documents.xlsx_bytes(title="Budget", rows=[["a"]]), "xl"),
}


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx"])
def test_a_zip_bomb_office_file_is_refused_before_it_is_unpacked(suffix: str) -> None:
    # 1 MB on the shared drive, 1 GB unpacked: python-pptx read every member whole (a 3 MB
    # .pptx took 3 GB and 54 s). The sizes the zip declares are checked before any inflating.
    make, folder = _OFFICE_SAMPLES[suffix]
    gigabyte = 1024**3
    bomb = documents.zip_with_zeros(make(), name=f"{folder}/media/image1.png", size=gigabyte)
    assert len(bomb) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(ExtractionError) as info:
            extract_text(data=bomb, suffix=suffix, fallback_title="f")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert re.fullmatch(
        rf"the \{suffix} file would unpack to 1,02\d\.\d MB \(the limit is 200 MB\): a zip "
        "bomb, or too large to read",
        str(info.value),
    )
    assert peak < 20 * 1024 * 1024


def test_a_zip_member_larger_than_its_declared_size_is_read_no_further() -> None:
    # A member declaring 4 KB and holding 256 MB: zipfile inflated it whole in one call (585 MB
    # of memory) before cutting it to its declared size. Each member is checked a megabyte
    # at a time first.
    make, _ = _OFFICE_SAMPLES[".pptx"]
    liar = documents.zip_with_zeros(
        make(), name="ppt/media/image1.png", size=256 * 1024 * 1024, declared=4096
    )
    tracemalloc.start()
    try:
        with pytest.raises(ExtractionError) as info:
            extract_text(data=liar, suffix=".pptx", fallback_title="f")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value) == (
        "not a readable .pptx file (its member 'ppt/media/image1.png' does not hold the size "
        "its zip directory declares)"
    )
    assert peak < 20 * 1024 * 1024


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx"])
def test_an_old_binary_or_encrypted_office_file_says_so(suffix: str) -> None:
    # A .doc saved as .docx, and Office's password-protected files, are OLE compound files.
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256)) * 8
    with pytest.raises(ExtractionError) as info:
        extract_text(data=ole, suffix=suffix, fallback_title="f")
    assert str(info.value) == (
        f"not a readable {suffix} file (it is password-protected, or an old binary Office "
        "file renamed: save it without a password in the current format)"
    )


_SHEET_START = (
    b"<worksheet xmlns='http://schemas.openxmlformats.org/spreadsheetml/2006/main'>"
    b"<sheetData><row r='1'><c r='A1' t='inlineStr'><is><t>"
)
_SHEET_END = b"</t></is></c></row></sheetData></worksheet>"


@pytest.mark.parametrize(
    "sheet",
    [
        _SHEET_START + b"cut",
        b"<?xml version='1.0'?><!DOCTYPE w [<!ENTITY x SYSTEM 'file:///etc/passwd'>]>"
        + _SHEET_START
        + b"&x;"
        + _SHEET_END,
    ],
    ids=["truncated", "external-entity"],
)
def test_a_damaged_xlsx_sheet_is_an_extraction_error_on_one_line(sheet: bytes) -> None:
    # Sheets are read after the workbook opens: their errors escaped extract_text as
    # ParseError, and openpyxl's own message runs over three lines.
    book = documents.zip_rewritten(
        documents.xlsx_bytes(title="t", rows=[["a"]]),
        replace={"xl/worksheets/sheet1.xml": sheet},
    )
    with pytest.raises(ExtractionError, match=r"^not a readable \.xlsx file \(") as info:
        extract_text(data=book, suffix=".xlsx", fallback_title="f")
    assert "\n" not in str(info.value)
    assert "root:" not in str(info.value)


def _sheet(dimension: str, cells: list[tuple[str, str]]) -> bytes:
    rows: dict[int, list[str]] = {}
    for ref, text in cells:
        number = int(re.sub(r"[A-Z]", "", ref))
        cell = f"<c r='{ref}' t='inlineStr'><is><t>{text}</t></is></c>"
        rows.setdefault(number, []).append(cell)
    data = "".join(f"<row r='{n}'>{''.join(cells)}</row>" for n, cells in sorted(rows.items()))
    return (
        "<worksheet xmlns='http://schemas.openxmlformats.org/spreadsheetml/2006/main'>"
        f"<dimension ref='{dimension}'/><sheetData>{data}</sheetData></worksheet>"
    ).encode()


def test_xlsx_cells_outside_the_declared_dimension_are_read() -> None:
    # Some exporters write a stale <dimension>: openpyxl's read-only mode trusted it and
    # dropped every cell outside it without a word.
    sheet = _sheet("A1:A1", [("A1", "kept"), ("C2", "right"), ("A9", "below")])
    book = documents.zip_rewritten(
        documents.xlsx_bytes(title="Budget", rows=[["x"]]),
        replace={"xl/worksheets/sheet1.xml": sheet},
    )
    doc = extract_text(data=book, suffix=".xlsx", fallback_title="f")
    assert doc.body == "Figures\nkept\nright\nbelow"


def test_an_xlsx_with_cells_at_far_corners_is_read_in_time() -> None:
    # Two cells, A1 and XFD60000, in a 5 KB file: openpyxl padded every row between to
    # 16,384 columns (a billion empty values, 15 s; at XFD1048576 it ran for hours).
    sheet = _sheet("A1:XFD60000", [("A1", "first"), ("XFD60000", "last")])
    book = documents.zip_rewritten(
        documents.xlsx_bytes(title="Budget", rows=[["x"]]),
        replace={"xl/worksheets/sheet1.xml": sheet},
    )
    assert len(book) < 10_000
    started = time.perf_counter()
    doc = extract_text(data=book, suffix=".xlsx", fallback_title="f")
    assert time.perf_counter() - started < 3
    assert doc.body == "Figures\nfirst\nlast"


def test_xlsx_values_keep_their_types_when_read_sparsely() -> None:
    import datetime

    book = documents.xlsx_bytes(
        title="Budget", rows=[["when", datetime.date(2026, 12, 8)], [None, 3, None, True]]
    )
    doc = extract_text(data=book, suffix=".xlsx", fallback_title="f")
    assert doc.body == "Figures\nwhen | 2026-12-08 00:00:00\n3 | True"


def test_docx_tracked_insertions_and_content_controls_are_text() -> None:
    # Word keeps a tracked insertion in <w:ins> and template fields in content controls
    # (<w:sdt>): python-docx's paragraph text and block iteration skip both, so a reviewed
    # contract or a filled-in form lost those words without a word said. Deleted text stays
    # out.
    data = documents.docx_bytes(title="T", heading="H", paragraphs=["Kept"])
    xml = zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml").decode()
    tracked = (
        '<w:ins w:id="1" w:author="a"><w:r><w:t xml:space="preserve"> and inserted</w:t></w:r>'
        '</w:ins><w:del w:id="2" w:author="a"><w:r><w:delText>deleted</w:delText></w:r></w:del>'
    )
    xml = xml.replace("<w:t>Kept</w:t></w:r>", "<w:t>Kept</w:t></w:r>" + tracked, 1)
    control = (
        "<w:sdt><w:sdtContent><w:p><w:r><w:t>Filled-in field</w:t></w:r></w:p>"
        "</w:sdtContent></w:sdt>"
    )
    xml = xml.replace("<w:sectPr", control + "<w:sectPr", 1)
    doc = extract_text(
        data=documents.zip_rewritten(data, replace={"word/document.xml": xml.encode()}),
        suffix=".docx",
        fallback_title="f",
    )
    assert doc.body == "H\n\nKept and inserted\n\ncell one | cell two\n\nFilled-in field"


def test_pptx_text_in_grouped_shapes_is_read() -> None:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Grouped"
    group = slide.shapes.add_group_shape()
    inner = group.shapes.add_group_shape()
    box = inner.shapes.add_textbox(Inches(1), Inches(1), Inches(2), Inches(1))
    box.text_frame.text = "Inside two groups"
    out = io.BytesIO()
    presentation.save(out)
    doc = extract_text(data=out.getvalue(), suffix=".pptx", fallback_title="f")
    assert doc.body == "Grouped\n\nInside two groups"


def test_library_warnings_do_not_reach_the_caller(recwarn: pytest.WarningsRecorder) -> None:
    import logging
    import warnings

    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    logging.getLogger().addHandler(handler)
    try:
        with ingestion._quiet_libraries():
            logging.getLogger("pypdf._reader").warning("Ignoring wrong pointing object")
            warnings.warn("Workbook contains no default style", UserWarning, stacklevel=1)
        assert records == [] and len(recwarn) == 0
        # Only for the extraction: afterwards the libraries log as configured.
        logging.getLogger("pypdf._reader").warning("later")
        assert [r.getMessage() for r in records] == ["later"]
    finally:
        logging.getLogger().removeHandler(handler)


def test_scan_reports_unsupported_files(tmp_path: Path) -> None:
    for name in ["a.md", "b.gz", "c.docx", "noext", ".hidden.gz"]:
        write(tmp_path / name, b"x")
    found, skipped, _ = scan_source_files([tmp_path])
    assert [p.name for p in found] == ["a.md", "c.docx"]
    assert [(s.path.name, s.reason.split(" (supported")[0]) for s in skipped] == [
        ("b.gz", "unsupported file type .gz"),
        ("noext", "unsupported file type (no extension)"),
    ]
    assert isinstance(skipped[0], SkippedFile)


# ------------------------------------------------------------------------- walking


def test_iter_source_files(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    for name in [
        "b.md",
        "a.TXT",
        "sub/c.rst",
        "sub/deeper/d.html",
        "z.pdf",
        "image.png",
        ".hidden.md",
        ".git/config.md",
        "sub/.cache/e.md",
        "noext",
    ]:
        write(root / name, "x")
    extra = write(tmp_path / "extra.htm", "x")
    hidden_given = write(tmp_path / ".given.md", "x")

    found = list(iter_source_files([root / "b.md", extra, root, hidden_given, root / "sub"]))
    assert found == sorted(found)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        ".given.md",
        "docs/a.TXT",
        "docs/b.md",
        "docs/sub/c.rst",
        "docs/sub/deeper/d.html",
        "docs/z.pdf",
        "extra.htm",
    ]
    again = list(iter_source_files([root / "sub", root, hidden_given, extra]))
    assert again == found


def test_walk_leaves_out_sphinx_copies_and_redirect_stubs(tmp_path: Path) -> None:
    # A copy of the real pandas pages: two API pages, two redirect stubs (pandas ships 1,511)
    # and a page's reST source under _sources; plus what sits beside them in a Sphinx build.
    site = tmp_path / "html"
    shutil.copytree(REAL_SITES / "pandas", site)
    for name in ["searchindex.js", "genindex.html", "py-modindex.html", "search.html"]:
        write(site / name, "<p>x</p>")
    write(site / "user_guide" / "search.html", "<p>A page about searching</p>")
    write(site / "later.html", '<meta http-equiv="refresh" content="5; url=a.html"><p>Soon</p>')
    found, skipped, _ = scan_source_files([site])
    assert [p.relative_to(site).as_posix() for p in found] == [
        "later.html",
        "reference/api/pandas.DataFrame.index.html",
        "reference/api/pandas.option_context.__call__.html",
        "user_guide/search.html",
    ]
    assert [s.path.name for s in skipped] == ["searchindex.js"]
    # Given by name, a stub is read; without searchindex.js, _sources is a folder like others.
    stub = site / "generated" / "pandas.DataFrame.index.html"
    assert scan_source_files([stub])[0] == [stub]
    (site / "searchindex.js").unlink()
    found, _, _ = scan_source_files([site])
    assert "_sources/reference/api/pandas.DataFrame.index.rst.txt" in [
        p.relative_to(site).as_posix() for p in found
    ]


def test_scan_reports_what_cannot_be_read_as_a_file(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    good = write(root / "good.md", "x")
    (root / "gone.md").symlink_to(root / "deleted.md")
    (root / "gone.gz").symlink_to(root / "deleted.gz")  # not ingested anyway: not reported
    os.mkfifo(root / "pipe.md")
    undecodable = os.path.join(os.fsencode(root), b"caf\xe9.md")
    with open(undecodable, "wb") as handle:
        handle.write(b"x")
    folder = os.path.join(os.fsencode(root), b"d\xe9j\xe0")
    os.mkdir(folder)
    with open(os.path.join(folder, b"inside.md"), "wb") as handle:
        handle.write(b"x")
    given_fifo = tmp_path / "given"
    os.mkfifo(given_fifo)

    found, unsupported, unreadable = scan_source_files([root, given_fifo, Path(os.devnull)])
    assert found == [good]
    assert unsupported == []
    assert sorted((os.fsencode(s.path), s.reason) for s in unreadable) == sorted(
        [
            (os.fsencode(os.devnull), "not a regular file"),
            (os.fsencode(given_fifo), "not a regular file"),
            (os.fsencode(root / "gone.md"), "a broken symbolic link"),
            (os.fsencode(root / "pipe.md"), "not a regular file"),
            (undecodable, "its file name is not valid UTF-8; rename it"),
            (
                os.path.join(folder, b"inside.md"),
                "the name of a folder on its path is not valid UTF-8; rename it",
            ),
        ]
    )


def test_scan_reports_a_linked_folder_and_a_link_loop_instead_of_passing_them_in_silence(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    good = write(root / "good.md", "# Good\n")
    shared = write(tmp_path / "shared" / "policy.md", "# Policy\n").parent
    (root / "shared").symlink_to(shared)  # its documents were left out without a word
    (root / "self").symlink_to(root)
    (root / "a.md").symlink_to(root / "b.md")
    (root / "b.md").symlink_to(root / "a.md")

    found, unsupported, unreadable = scan_source_files([root])
    assert found == [good]
    assert unsupported == []
    linked = "a symbolic link to a folder, not followed (give the folder itself as a PATH)"
    assert sorted((s.path.name, s.reason) for s in unreadable) == [
        ("a.md", "a symbolic link loop"),
        ("b.md", "a symbolic link loop"),
        ("self", linked),
        ("shared", linked),
    ]


def test_a_link_to_a_file_outside_the_folder_is_not_followed(tmp_path: Path) -> None:
    # Anyone who can write to the shared drive could plant notes.txt -> /etc/passwd (or the
    # server's .env): its contents became a document, chunked and quoted to the group.
    root = tmp_path / "share"
    real = write(root / "sub" / "real.md", "# Real\n")
    secret = write(tmp_path / "server" / "secrets.env", "DJANGO_SECRET_KEY=hunter2\n")
    (root / "notes.txt").symlink_to(secret)
    (root / "passwd.txt").symlink_to("/etc/passwd")
    (root / "alias.md").symlink_to(real)  # inside the folder: the same document, once

    found, unsupported, unreadable = scan_source_files([root])
    assert found == [root / "alias.md"]
    assert os.path.realpath(found[0]) == str(real.resolve())
    assert unsupported == []
    outside = (
        "a symbolic link to a file outside the folder, not followed (give the file itself "
        "as a PATH)"
    )
    assert sorted((s.path.name, s.reason) for s in unreadable) == [
        ("notes.txt", outside),
        ("passwd.txt", outside),
    ]
    # Given by name, a link is the operator's choice, and is read.
    assert scan_source_files([root / "notes.txt"])[0] == [root / "notes.txt"]


def test_shown_path_escapes_control_characters_of_a_file_name() -> None:
    # A name holding a line break forged a second report line; one holding ESC drove the
    # terminal (cleared the screen) when its "Skipped ..." line was printed.
    assert (
        ingestion.shown_path("/srv/a\nSkipped /etc/passwd.md") == "/srv/a\\nSkipped /etc/passwd.md"
    )
    assert ingestion.shown_path("/srv/b\x1b[2J.md") == "/srv/b\\x1b[2J.md"
    assert ingestion.shown_path("/srv/tab\there.md") == "/srv/tab\\there.md"


@pytest.mark.parametrize("suffix", [".md", ".html", ".txt"])
def test_titles_hold_no_control_characters(suffix: str) -> None:
    # From a heading, a <title> or the file name: a title is one line of text, and ESC
    # sequences in it reached every terminal, log and API client that printed it.
    heading = "Release \x1b[31mnotes\x1b[0m \x07"
    data = {".md": f"# {heading}\n\nText.\n", ".html": f"<title>{heading}</title><p>Text.</p>"}
    doc = extract_text(
        data=data.get(suffix, "Text.\n").encode(), suffix=suffix, fallback_title=heading
    )
    assert doc.title == "Release [31mnotes[0m"


def test_shown_path_escapes_bytes_that_are_not_utf8() -> None:
    path = os.fsdecode(b"/srv/caf\xe9.md")
    assert ingestion.shown_path(path) == "/srv/caf\\xe9.md"
    assert ingestion.shown_path(Path("/srv/caf\u00e9.md")) == "/srv/caf\u00e9.md"


def test_a_fifo_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    real_open = Path.open

    def guarded_open(self: Path, *args: object, **kwargs: object) -> object:
        # Opening it to read would wait for a writer forever: fail instead of hanging.
        assert self != fifo, "the FIFO was opened"
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", guarded_open)
    with pytest.raises(ExtractionError, match="not a regular file"):
        extract_file(fifo)


def test_iter_source_files_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(iter_source_files([tmp_path / "nope"]))


def test_supported_suffixes() -> None:
    expected = {".md", ".markdown", ".txt", ".rst", ".html", ".htm", ".pdf", ".docx", ".pptx"}
    assert expected | {".xlsx"} == SUPPORTED_SUFFIXES


def test_content_hash() -> None:
    assert content_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_hash("é") != content_hash("e")
    assert len(content_hash("x" * 1000)) == 64


# ------------------------------------------------------------------------ chunking


def _word_length_at(body: str, index: int) -> int:
    start = index
    while start > 0 and not body[start - 1].isspace():
        start -= 1
    match = re.compile(r"\S*").match(body, index)
    assert match is not None
    return match.end() - start


def check_spans(body: str, spans: list[ChunkSpan], size: int) -> None:
    assert [s.ordinal for s in spans] == list(range(len(spans)))
    for span in spans:
        assert body[span.start : span.end] == span.text
        assert span.text
        assert span.text == span.text.strip()
        assert len(span.text) <= size
        # A cut inside a word is only allowed when the word cannot fit in a chunk.
        if span.start > 0 and not body[span.start - 1].isspace():
            assert _word_length_at(body, span.start) > size
        if span.end < len(body) and not body[span.end].isspace():
            assert _word_length_at(body, span.end - 1) > size
    for before, after in itertools.pairwise(spans):
        assert before.start < after.start
        assert before.end < after.end


pieces = st.one_of(
    st.text(alphabet="abcdefgh", min_size=1, max_size=12),
    st.text(alphabet="xyz", min_size=90, max_size=400),
    st.sampled_from([" ", "  ", "\n", "\n\n", "\n \n", ". ", "! ", "\t", "\u00a0", "\u2028"]),
    st.text(max_size=5),
)
bodies = st.lists(pieces, max_size=300).map("".join)


@settings(max_examples=300, deadline=None)
@given(body=bodies, size=st.integers(min_value=100, max_value=400))
def test_chunk_properties(body: str, size: int) -> None:
    spans = chunk_text(body, size=size)
    check_spans(body, spans, size)
    for before, after in itertools.pairwise(spans):
        assert before.end <= after.start
    # Everything not covered by a chunk is whitespace.
    gaps = [body[: spans[0].start] if spans else body]
    gaps += [body[a.end : b.start] for a, b in itertools.pairwise(spans)]
    gaps.append(body[spans[-1].end :] if spans else "")
    assert "".join(gaps).strip() == ""
    assert chunk_text(body, size=size) == spans


@settings(max_examples=200, deadline=None)
@given(body=bodies, size=st.integers(min_value=100, max_value=400), data=st.data())
def test_chunk_properties_with_overlap(body: str, size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(min_value=1, max_value=(size - 1) // 2))
    spans = chunk_text(body, size=size, overlap=overlap)
    check_spans(body, spans, size)
    for before, after in itertools.pairwise(spans):
        assert after.start >= before.end - overlap
    assert [(s.start, s.end) for s in spans] == [
        (s.start, s.end) for s in chunk_text(body, size=size, overlap=overlap)
    ]
    covered: set[int] = set()
    for span in spans:
        covered.update(range(span.start, span.end))
    assert all(body[i].isspace() for i in range(len(body)) if i not in covered)


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    paragraphs = [("word " * n).strip() + "." for n in (30, 150, 90, 10, 200, 40)]
    body = "\n\n".join(paragraphs)
    spans = chunk_text(body, size=1200)
    chunk_paragraphs = [p for span in spans for p in span.text.split("\n\n")]
    assert chunk_paragraphs == paragraphs
    assert len(spans) < len(paragraphs)  # small paragraphs are packed together


def test_long_paragraph_breaks_at_line_then_sentence_then_space() -> None:
    lines = "\n".join(["a" * 60] * 5)
    assert [s.text for s in chunk_text(lines, size=130)] == [
        "a" * 60 + "\n" + "a" * 60,
        "a" * 60 + "\n" + "a" * 60,
        "a" * 60,
    ]
    sentences = "First sentence here. " * 10
    assert all(s.text.endswith(".") for s in chunk_text(sentences, size=100))
    words = "abc " * 100
    assert all(s.text.endswith("abc") for s in chunk_text(words, size=101))


def test_overlong_word_is_cut_at_size() -> None:
    body = "short " + "x" * 250 + " tail"
    assert [s.text for s in chunk_text(body, size=100)] == [
        "short",
        "x" * 100,
        "x" * 100,
        "x" * 50 + " tail",
    ]


def test_overlap_repeats_the_end_of_the_previous_chunk() -> None:
    body = " ".join(f"w{i:03d}" for i in range(300))
    spans = chunk_text(body, size=200, overlap=50)
    for before, after in itertools.pairwise(spans):
        assert before.end - 50 <= after.start < before.end
        assert body[after.start - 1] == " "
    assert spans[-1].end == len(body)


def test_overlap_never_cuts_a_word_that_fits() -> None:
    body = "a a " + "x" * 179
    assert [s.text for s in chunk_text(body, size=180, overlap=1)] == ["a a", "x" * 179]


def test_chunk_text_edge_cases() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\n\t ") == []
    assert chunk_text("  hi  ") == [ChunkSpan(ordinal=0, start=2, end=4, text="hi")]


@pytest.mark.parametrize(("size", "overlap"), [(99, 0), (100, -1), (100, 50), (1200, 600)])
def test_chunk_text_validates_arguments(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", size=size, overlap=overlap)


def test_chunk_text_is_fast_on_ten_megabytes() -> None:
    paragraph = " ".join(["lorem ipsum dolor sit amet."] * 30)
    body = "\n\n".join([paragraph] * (10_000_000 // len(paragraph)))
    spans = chunk_text(body, size=1200)
    assert spans[-1].end == len(body)
    assert sum(len(s.text) for s in spans) > 0.99 * len(body)
