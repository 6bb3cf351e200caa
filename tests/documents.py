"""Real documents of every supported type, written at test time by the libraries that make them."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import docx
import openpyxl
import pptx
import pypdf
from fpdf import FPDF


def docx_bytes(*, title: str | None, heading: str, paragraphs: list[str]) -> bytes:
    document = docx.Document()
    if title is not None:
        document.core_properties.title = title
    document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "cell one", "cell two"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes(*, slide_title: str, text: str) -> bytes:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = slide_title
    slide.placeholders[1].text = text
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def xlsx_bytes(*, title: str, rows: list[list[object]]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.properties.title = title
    sheet = workbook.active
    sheet.title = "Figures"
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def pdf_bytes(*, title: str | None, lines: list[str]) -> bytes:
    pdf = FPDF()
    if title is not None:
        pdf.set_title(title)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    for line in lines:
        pdf.multi_cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def pdf_mixed_fonts_bytes() -> bytes:
    """A term in Helvetica touching its description in Helvetica-Oblique, as DocBook sets it."""
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.write(8, "GNOME")
    pdf.set_font("Helvetica", style="I", size=12)
    pdf.write(8, "The GNOME desktop")
    pdf.ln()
    pdf.set_font("Helvetica", size=12)
    pdf.write(8, "JavaScript and McDonald stay whole.")
    return bytes(pdf.output())


def encrypted_pdf_bytes(*, user_password: str) -> bytes:
    writer = pypdf.PdfWriter(
        clone_from=pypdf.PdfReader(io.BytesIO(pdf_bytes(title=None, lines=["Secret"])))
    )
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# A Texinfo-made page (as /usr/share/doc/libffi8/html/*.html): its navigation bar is chrome.
TEXINFO_HTML = """<!DOCTYPE html><html><head><title>Closure Example (mylib manual)</title></head>
<body lang="en"><div class="section" id="Closure-Example"><div class="header"><p>
Next: <a href="n.html">Thread Safety</a>, Previous: <a href="p.html">The Closure API</a>,
Up: <a href="u.html">Using mylib</a> &nbsp; [<a href="Index.html">Index</a>]</p></div><hr>
<h3 class="section">2.6 Closure Example</h3>
<ul class="section-toc"><li><a href="#Arrays">Arrays</a></li></ul>
<p>A trivial example that binds <code>fputs</code> to a stream.</p>
<pre class="example">int main()
{
  return 0;
}</pre>
</div></body></html>"""

# A site page: header, nav, aside and footer around one <main>.
SITE_HTML = """<html><head><title>Billing FAQ</title></head><body>
<header><a href="/">Home</a> <a href="/login">Log in</a></header>
<nav><ul><li>Products</li><li>Pricing</li></ul></nav>
<main><article><header><h1>How refunds work</h1></header>
<p>Refunds reach the card within five days.</p></article></main>
<aside>Related: shipping times</aside><footer>Copyright 2026 Example Ltd</footer>
</body></html>"""


def zip_rewritten(data: bytes, *, replace: dict[str, bytes] | None = None) -> bytes:
    """An Office file (a zip) with some members' contents replaced."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            body = (replace or {}).get(info.filename)
            target.writestr(info.filename, body if body is not None else source.read(info))
    return out.getvalue()


def zip_with_zeros(data: bytes, *, name: str, size: int, declared: int | None = None) -> bytes:
    """An Office file (a zip) with one more member, ``size`` zero bytes deflated (a zip bomb:
    1 GB packs into 1 MB), its size given as ``declared`` if that is given.

    Written by hand: deflating a gigabyte takes seconds, but after a full flush every
    megabyte of zeros deflates to the same bytes, so one megabyte's output is repeated."""
    megabyte = 1024 * 1024
    assert size % megabyte == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(b"\0" * megabyte)
    block = compressor.flush(zlib.Z_FULL_FLUSH)
    repeats = size // megabyte
    packed = block * repeats + compressor.flush()
    crc = 0
    zeros = b"\0" * megabyte
    for _ in range(repeats):
        crc = zlib.crc32(zeros, crc)
    source = zipfile.ZipFile(io.BytesIO(data))
    members = [(info.filename, source.read(info)) for info in source.infolist()]
    out = io.BytesIO()
    central = io.BytesIO()
    entries = [(n, zlib.compress(b, 9)[2:-4], zlib.crc32(b), len(b)) for n, b in members]
    entries.append((name, packed, crc, size if declared is None else declared))
    for filename, body, checksum, length in entries:
        encoded = filename.encode()
        offset = out.tell()
        fields = (20, 0, 8, 0, 0, checksum, len(body), length, len(encoded))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + encoded + body)
        central.write(
            struct.pack("<IH", 0x02014B50, 20)
            + struct.pack("<HHHHHIIIHHHHHII", *fields, 0, 0, 0, 0, 0, offset)
            + encoded
        )
    start = out.tell()
    directory = central.getvalue()
    count = len(entries)
    out.write(directory + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count,
                                      len(directory), start, 0))  # fmt: skip
    return out.getvalue()


def pdf_flate_bomb_bytes(*, size: int) -> bytes:
    """A one-page PDF whose content stream inflates to ``size`` bytes (blank space, then a
    line of text) from about a thousandth of that: PDFium inflates it whole."""
    megabyte = 1024 * 1024
    assert size % megabyte == 0
    text = b"BT /F1 12 Tf 72 720 Td (Behind the blanks) Tj ET"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(b" " * megabyte)
    block = compressor.flush(zlib.Z_FULL_FLUSH)  # every megabyte of blanks deflates alike
    deflated = block * (size // megabyte) + compressor.compress(text) + compressor.flush()
    checksum = 1
    blanks = b" " * megabyte
    for _ in range(size // megabyte):
        checksum = zlib.adler32(blanks, checksum)
    checksum = zlib.adler32(text, checksum)
    stream = b"\x78\xda" + deflated + struct.pack(">I", checksum)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()
