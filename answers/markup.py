"""Each format's own markup turned into clean Markdown at ingest (ADR 0026).

Chunk text is Markdown that reads correctly raw (API clients, the document page's
``<pre>``) and rendered (``answers.rendering``): literals and identifiers in backticks,
which need no escaping inside, emphasis as ``*…*``, headings as ``#``, and grammar
productions, code, interpreter sessions and tables as fenced code blocks. Backslash
escapes only where Markdown would otherwise misread the text.

- ``pydoc_to_markdown``: the text of ``pydoc_data.topics`` (the demo corpus), which is
  Sphinx's plain-text output rather than reST: literals are written ``"like this"``,
  emphasis ``*like this*``, headings are underlined and blocks are indented.
- ``rst_to_markdown``: inline reST (roles, ````literal````, links, substitutions), its
  section titles and its ``::`` literal blocks and directives.

Citation markers are not this module's business: every quoted passage is neutralized
before a provider sees it (``prompt.neutralize_markers``), so a footnote ``[4]`` kept in
the text can never cite a source. No Django imports.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["code_span", "escape_text", "fenced", "pydoc_to_markdown", "rst_to_markdown"]

# A placeholder for a finished code span while the rest of a paragraph is converted: NUL
# never survives ingest (``ingestion._sanitize``), so it cannot occur in the text itself.
_HOLE = "\x00"
_HOLE_RE = re.compile(r"\x00(\d+)\x00")
_BACKTICKS = re.compile(r"`+")


def code_span(text: str) -> str:
    """``text`` as a Markdown code span: a fence longer than any backtick run inside,
    padded with a space when it starts or ends with a backtick (CommonMark's rule)."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fence(lines: list[str], info: str = "") -> list[str]:
    longest = max((len(run) for line in lines for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *lines, fence]


def fenced(lines: list[str], *, info: str = "") -> str:
    """``lines`` as a fenced code block, its fence longer than any backtick run inside."""
    return "\n".join(_fence(lines, info))


class _Spans:
    """Finished code spans of one paragraph, held out of the text until the end."""

    def __init__(self) -> None:
        self.spans: list[str] = []

    def hole(self, code: str) -> str:
        return self.raw(code_span(code))

    def raw(self, markdown: str) -> str:
        """Hold finished Markdown (which may hold holes itself) out of later rules."""
        self.spans.append(markdown)
        return f"{_HOLE}{len(self.spans) - 1}{_HOLE}"

    def fill(self, text: str) -> str:
        while _HOLE_RE.search(text):
            text = _HOLE_RE.sub(lambda m: self.spans[int(m[1])], text)
        return text


# An identifier Markdown would misread outside a code span: it starts or ends with "_"
# (``__init__``, ``_private``), or starts with "*" (``*args``, ``**kwargs``).
_EDGE_IDENTIFIER = re.compile(
    r"(?<![\w`*\\\x00])(?:\*{1,2}[^\W\d_]\w*|_+[^\W_]\w*|[^\W\d]\w*_)"
    r"(?:\.\w+)*(?:\(\))?(?![\w*`\x00])"
)
# Characters that would start something in Markdown where the source meant them as text.
_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)")
_ANGLE = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?\w+;)")
_STRAY_BACKTICK = re.compile(r"`")
# A "]" that would close a link's text ("[a](b)", "[]()", "[a][b]" as text, not a link).
_LINK_CLOSE = re.compile(r"\](?=[(\[])")
# "~~" opens or closes strikethrough (enabled for answers, whose renderer passages share).
_STRIKE = re.compile(r"~~")
# A character that one of escape_text's rules acts on (an edge identifier needs "*" or "_").
_HAZARD = re.compile(r"[*_\\`<&\]~]")


def _escape_text(text: str) -> str:
    text = _BACKSLASH.sub(r"\\\\", text)
    text = _STRAY_BACKTICK.sub(r"\\`", text)
    text = _ANGLE.sub(r"\\<", text)
    text = _LINK_CLOSE.sub(r"\\]", text)
    text = _STRIKE.sub(r"\\~\\~", text)
    return _ENTITY.sub(r"\\&", text)


def escape_text(text: str) -> str:
    """Plain text (an HTML text node) as Markdown that reads the same: identifiers that
    start or end with "_" in backticks, other hazards backslash-escaped."""
    if not _HAZARD.search(text):  # most text nodes: every rule below would leave them alone
        return text
    spans = _Spans()
    text = _identifiers_to_code(text, spans)
    return spans.fill(_escape_delimiters(_escape_text(text)))


def _escape_delimiters(text: str) -> str:
    # "*" or "_" that could open or close emphasis; not "a * b", not snake_case. A text
    # node's edge may touch markup, so it counts as neither a space nor a letter.
    out: list[str] = []
    for index, char in enumerate(text):
        if char in "*_":
            before = text[index - 1] if index else "\x00"
            after = text[index + 1] if index + 1 < len(text) else "\x00"
            spaced = before.isspace() and after.isspace()
            if not (spaced or (char == "_" and before.isalnum() and after.isalnum())):
                out.append("\\")
        out.append(char)
    return "".join(out)


def _identifiers_to_code(text: str, spans: _Spans) -> str:
    return _EDGE_IDENTIFIER.sub(lambda m: spans.hole(m[0]), text)


def _is_identifierish(text: str) -> bool:
    # Emphasis around a name (Sphinx writes some :attr: and :term: targets so) reads best,
    # and renders right, as code: "*__slots__*" would otherwise turn bold in Markdown.
    return any(char in text for char in "_*`\\<[") or text.endswith("()")


def _emphasis(match: re.Match[str], spans: _Spans) -> str:
    marks, inner = match[1], match[2]
    if _is_identifierish(inner) and _HOLE not in inner:
        return spans.hole(inner)
    inner = _escape_text(_identifiers_to_code(inner, spans))
    return spans.raw(f"{marks}{inner}{marks}")


# ------------------------------------------------------------------------- pydoc

# A literal as Sphinx's text builder writes ``literal``: straight double quotes (prose
# quotes are typographic “…”), not empty, not starting with a space, on at most two lines.
_PYDOC_LITERAL = re.compile(
    r'(?<![\w"\\])"(?=[^\s"])([^"\n]{1,120}?(?:\n[^"\n]{1,120}?)?)"(?:(?!\w)|(?=s\b))'
)
# A literal that is itself quoted (``"max-temp °F"``, ``"``) comes out with its quotes.
_PYDOC_QUOTED_LITERAL = re.compile(r'(?<![\w"])"("|"[^"\n]{1,80}")"(?![\w"])')
_PYDOC_EMPHASIS = re.compile(
    r"(?<![\w*\\])(\*{1,2})(?=[^\s*])([^*\n]{1,200}?(?:\n[^*\n]{1,200}?)?)(?<=[^\s*\\])\1(?![\w*])"
)
# Section underlines of Sphinx's text builder, by level.
_PYDOC_LEVELS = {"*": 1, "=": 2, "-": 3, "~": 4, '"': 5, "+": 6}
_RUBRIC = re.compile(r"^-\[ (.+) \]-$")
_TABLE_LINE = re.compile(r"^\s*(?:\+[-=+]{3,}|\|.*\||={3,}(?:\s+={3,})+\s*$)")
_TRANSITION = re.compile(r"^\s*([=\-*_~])\1{3,}\s*$")
_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.)(?:\s|$)")
_PROSE_WORD = re.compile(r"^[A-Za-z][a-z\u2019'\-]*$|^\d+$")
_PUNCTUATION = "\"'()*,.;:!?[]\u201c\u201d\u2018\u2019"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _paragraphs(text: str) -> list[list[str]]:
    paragraphs: list[list[str]] = []
    current: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            current.append(line.rstrip())
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    return paragraphs


def _reads_as_prose(lines: list[str]) -> bool:
    """Mostly plain words: the test that tells an indented note or list continuation from
    a code example (``manager = (EXPRESSION)``, ``with A() as a:``)."""
    tokens = " ".join(lines).split()
    if not tokens:
        return False
    words = sum(bool(_PROSE_WORD.match(token.strip(_PUNCTUATION))) for token in tokens)
    if len(tokens) <= 3:
        # "Note:", "See also:" and short definition-list terms.
        return words == len(tokens) and lines[-1].rstrip().endswith(":")
    return words >= 0.7 * len(tokens)


def _code_kind(lines: list[str]) -> str | None:
    """The fence's info string if ``lines`` are grammar, a table or a session, else None."""
    if any("::=" in line for line in lines):
        return ""
    if _TABLE_LINE.match(lines[0]):
        return ""
    if _PROMPT.match(lines[0]):
        return "pycon"
    return None


def _pydoc_inline(text: str) -> str:
    spans = _Spans()
    text = _PYDOC_QUOTED_LITERAL.sub(lambda m: spans.hole(m[1]), text)
    text = _PYDOC_LITERAL.sub(lambda m: spans.hole(m[1]), text)

    def emphasis(match: re.Match[str]) -> str:
        return _emphasis(match, spans)

    text = _PYDOC_EMPHASIS.sub(emphasis, text)
    text = _identifiers_to_code(text, spans)
    return spans.fill(_escape_text(text))


def _heading(lines: list[str], levels: dict[str, int], inline: Callable[[str], str]) -> str | None:
    if len(lines) != 2 or _indent(lines[0]) or _indent(lines[1]):
        return None
    title, under = lines[0].strip(), lines[1].strip()
    char = under[0]
    if char in levels and under == char * len(under) and len(under) >= len(title) > 0:
        return "#" * levels[char] + " " + inline(title)
    return None


def _dedent(lines: list[str]) -> list[str]:
    cut = min(_indent(line) for line in lines if line.strip())
    return [line[cut:] for line in lines]


def _convert_blocks(
    text: str,
    *,
    inline: Callable[[str], str],
    levels: dict[str, int],
    code_info: str,
    literal_after: Callable[[list[str]], bool],
) -> str:
    """Paragraphs to Markdown blocks: headings, fenced code, converted prose.

    A paragraph indented deeper than the prose before it is code when it is a grammar
    production, a table or an interpreter session, when ``literal_after`` says the prose
    announced it, or when it does not read as prose.
    """
    out: list[str] = []
    base = 0
    code: list[str] = []  # the code block being collected, original indentation
    code_indent = 0
    code_info_now = code_info
    previous: list[str] = []

    def end_code() -> None:
        if code:
            while code and not code[-1].strip():
                code.pop()
            out.append("\n".join(_fence(_dedent(code), code_info_now)))
            code.clear()

    for lines in _paragraphs(text):
        indent = _indent(lines[0])
        # A code block with blank lines inside goes on while what follows is indented as
        # deep and is not prose.
        if (
            code
            and indent > base
            and indent >= code_indent
            and (_code_kind(lines) is not None or not _reads_as_prose(lines))
        ):
            code.extend(["", *lines])
            continue
        end_code()
        heading = _heading(lines, levels, inline)
        rubric = _RUBRIC.match(lines[0].strip()) if len(lines) == 1 else None
        kind = _code_kind(lines)
        if heading:
            out.append(heading)
            base = 0
        elif len(lines) == 1 and _TRANSITION.match(lines[0]):
            out.append("---")
        elif rubric:
            out.append(f"**{inline(rubric[1])}**")
        elif kind is not None or (
            indent > base and (literal_after(previous) or not _reads_as_prose(lines))
        ):
            code, code_indent = list(lines), indent
            code_info_now = code_info if kind is None else kind
        else:
            out.append(inline("\n".join(lines)))
            # The indentation a nested block must exceed: this paragraph's own, or its
            # hanging indent ("5. If ..." continues at 3 spaces).
            base = indent if len(lines) == 1 else min(indent, _indent(lines[-1])) or indent
            if indent == 0 and len(lines) > 1:
                base = 0
        previous = lines
    end_code()
    return "\n\n".join(out).strip("\n") + "\n"


def _pydoc_announces_code(previous: list[str]) -> bool:
    # Sphinx drops the "::" of a literal block; the sentence before it still ends in ":".
    # "Note:" and "See also:" announce prose.
    if not previous:
        return False
    last = previous[-1].strip()
    return last.endswith(":") and len(" ".join(previous).split()) > 3


def pydoc_to_markdown(text: str) -> str:
    """A ``pydoc_data.topics`` text (Sphinx's plain-text output) as Markdown."""
    text = text.replace("\r\n", "\n").expandtabs(8)
    return _convert_blocks(
        text,
        inline=_pydoc_inline,
        levels=_PYDOC_LEVELS,
        code_info="python3",
        literal_after=_pydoc_announces_code,
    )


# -------------------------------------------------------------------------- reST

# :role:`text`, :role:`title <target>`, :domain:role:`~mod.name`.
_RST_ROLE = re.compile(r":(?:[\w-]+:)?[\w-]+:`([^`]+)`")
_RST_LITERAL = re.compile(r"``(?=\S)(.+?)(?<=\S)``")
_RST_LINK = re.compile(r"`([^`<]+?)\s*<([^`>]+)>`__?")
_RST_INTERPRETED = re.compile(r"(?<![\w`])`(?=\S)([^`]+?)(?<=\S)`(?:__?)?(?![\w`])")
_RST_REFERENCE = re.compile(r"(?<![\w`|])([A-Za-z][\w.-]*)__?(?![\w])")
_RST_SUBSTITUTION = re.compile(r"\|([^|\s][^|]*?)\|(?:__?)?")
_RST_FOOTNOTE_REF = re.compile(r"\s?\[(?:#\w*|\*|\d+)\]_")
_RST_ROLE_TITLE = re.compile(r"^(.*?)\s*<[^<>]+>$")
_RST_DIRECTIVE = re.compile(r"^\s*\.\.\s+([\w:-]+)::\s*(.*)$")
_RST_COMMENT = re.compile(r"^\s*\.\.(?:\s|$)")
_RST_TARGET = re.compile(r"^\s*\.\.\s+_[^:]*:")
_RST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)]|#[.)]|\(\d+\))\s+(?=\S)")
_RST_CODE_DIRECTIVES = frozenset({"code", "code-block", "sourcecode", "productionlist", "doctest"})
_RST_ADMONITIONS = frozenset(
    {"note", "warning", "tip", "important", "caution", "attention", "hint", "danger",
     "error", "seealso", "admonition", "versionadded", "versionchanged", "deprecated"}
)  # fmt: skip
_RST_LEVEL_CHARS = "=-~^\"'`#*+_.:<>"


def _role(match: re.Match[str], spans: _Spans) -> str:
    inner = match[1]
    titled = _RST_ROLE_TITLE.match(inner)
    if titled:  # :ref:`the section <label>`: its title is what a reader sees
        return titled[1]
    return spans.hole(inner.lstrip("~!"))


def _rst_inline(text: str) -> str:
    spans = _Spans()
    text = _RST_LITERAL.sub(lambda m: spans.hole(m[1]), text)
    text = _RST_ROLE.sub(lambda m: _role(m, spans), text)
    text = _RST_LINK.sub(lambda m: spans.raw(f"[{_escape_text(m[1])}]({m[2]})"), text)
    text = _RST_INTERPRETED.sub(lambda m: spans.hole(m[1]), text)
    text = _RST_FOOTNOTE_REF.sub("", text)
    text = _RST_SUBSTITUTION.sub(lambda m: m[1], text)
    text = _RST_REFERENCE.sub(lambda m: m[1], text)

    def emphasis(match: re.Match[str]) -> str:
        return _emphasis(match, spans)

    text = _PYDOC_EMPHASIS.sub(emphasis, text)
    text = _identifiers_to_code(text, spans)
    return spans.fill(_escape_text(text))


def _rst_blocks(text: str) -> str:
    """Directives and ``::`` rewritten into what ``_convert_blocks`` reads, line by line:
    a code directive's body stays indented (code), an admonition becomes "Note:" prose,
    comments and targets go."""
    out: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        directive = _RST_DIRECTIVE.match(line)
        if directive:
            name = directive[1].split(":")[-1].lower()
            indent = _indent(line)
            body_start = index + 1
            # Options (":linenos:") belong to the directive, not its body.
            while body_start < len(lines) and re.match(r"^\s+:[\w-]+:", lines[body_start]):
                body_start += 1
            end = body_start
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
                end += 1
            body = lines[body_start:end]
            if name in _RST_CODE_DIRECTIVES:
                info = directive[2].strip() if name != "productionlist" else ""
                out.extend(["", f"{' ' * indent}{_HOLE}CODE {info}{_HOLE}"])
                out.extend(body)
            elif name in _RST_ADMONITIONS:
                label = name.replace("seealso", "See also").capitalize()
                title = directive[2].strip()
                out.append(" " * indent + (f"{label}: {title}" if title else f"{label}:"))
                out.append("")
                out.extend(_dedent_by(body, 0))
            elif name in {"image", "figure", "toctree", "contents", "index", "include"}:
                pass
            else:
                out.append(" " * indent + directive[2].strip())
                out.extend(body)
            index = end
            continue
        if _RST_TARGET.match(line) or _RST_COMMENT.match(line):
            index += 1
            while index < len(lines) and (not lines[index].strip() or _indent(lines[index]) > 0):
                if (
                    not lines[index].strip()
                    and index + 1 < len(lines)
                    and not _indent(lines[index + 1])
                ):
                    break
                index += 1
            continue
        if line.rstrip().endswith("::"):
            # "Example::" reads "Example:"; a lone "::" goes.
            stripped = line.rstrip()[:-2].rstrip()
            # Its block is indented past the paragraph's text (a list item's text, too).
            item = _RST_ITEM.match(line)
            marker = f"{' ' * (item.end() if item else _indent(line))}{_HOLE}LITERAL{_HOLE}"
            out.extend([(stripped + ":") if stripped.strip() else "", "", marker])
        else:
            out.append(line)
        index += 1
    return "\n".join(out)


def _dedent_by(lines: list[str], keep: int) -> list[str]:
    if not any(line.strip() for line in lines):
        return []
    cut = min(_indent(line) for line in lines if line.strip())
    return [" " * keep + line[cut:] if line.strip() else "" for line in lines]


def rst_to_markdown(text: str) -> str:
    """A reStructuredText document as Markdown (inline markup, titles, literal blocks,
    the common directives); what no rule covers stays as the source wrote it."""
    paragraphs = _paragraphs(_rst_blocks(text.replace("\r\n", "\n").expandtabs(8)))
    out: list[str] = []
    # Titles take their level from the order their adornments first appear (as docutils).
    levels: dict[str, int] = {}
    index = 0
    while index < len(paragraphs):
        lines = paragraphs[index]
        index += 1
        marker = lines[0].strip()
        if marker.startswith(_HOLE):
            info = marker.strip(_HOLE).removeprefix("CODE").removeprefix("LITERAL").strip()
            block: list[str] = []
            # The literal block: the paragraphs that follow indented deeper than the line
            # that announced it (blank lines inside); the text after it at that line's own
            # indentation, in a list item or a block quote, is prose again.
            while (
                index < len(paragraphs)
                and _indent(paragraphs[index][0]) > _indent(lines[0])
                and not paragraphs[index][0].lstrip().startswith(_HOLE)
            ):
                block += ["", *paragraphs[index]] if block else paragraphs[index]
                index += 1
            if block:
                out.append("\n".join(_fence(_dedent(block), info)))
            continue
        title = _rst_title_of(lines, levels)
        if title:
            out.append(title)
            rest = lines[3:] if _is_overlined(lines) else lines[2:]
            if rest:
                out.append(_rst_paragraph(rest))
            continue
        kind = _code_kind(lines)
        if kind is not None:
            out.append("\n".join(_fence(_dedent(lines), kind)))
            continue
        out.append(_rst_paragraph(lines))
    return "\n\n".join(part for part in out if part).strip("\n") + "\n"


def _rst_paragraph(lines: list[str]) -> str:
    return _rst_inline("\n".join(lines))


def _is_adornment(line: str) -> bool:
    stripped = line.rstrip()
    return (
        len(stripped) >= 2
        and stripped[0] in _RST_LEVEL_CHARS
        and stripped == stripped[0] * len(stripped)
    )


def _is_overlined(lines: list[str]) -> bool:
    return len(lines) >= 3 and _is_adornment(lines[0]) and lines[2].rstrip() == lines[0].rstrip()


def _rst_title_of(lines: list[str], levels: dict[str, int]) -> str | None:
    if _is_overlined(lines):
        key, title = "o" + lines[0][0], lines[1].strip()
    elif len(lines) >= 2 and _is_adornment(lines[1]) and not _indent(lines[0]):
        key, title = lines[1][0], lines[0].strip()
        if len(lines[1].rstrip()) < len(title) and len(lines[1].rstrip()) < 4:
            return None
    else:
        return None
    level = levels.setdefault(key, min(len(levels) + 1, 6))
    return "#" * level + " " + _rst_inline(title)
