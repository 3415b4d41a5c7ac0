"""The documents of bench/chaos.py: real texts from the test fixtures and the evaluation data written out as
the formats docqa reads (text, Markdown, HTML, and PDF and DOCX built here with the standard library), and
malformed and hostile files (bombs, deep nesting, a one-line file, noise) that docqa must refuse with a
typed reason."""

import io
import json
import zipfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIME = {
    "txt": "text/plain",
    "md": "text/markdown",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}

# ---------------------------------------------------------------------------------------------------------
# Documents: real texts, written out as the formats docqa reads.


def pdf_bytes(title, text, first_stream=None):
    """A PDF with the text in Helvetica, 50 lines of at most 95 characters per page, Latin-1 only;
    `first_stream`, when given, is the first page's compressed content instead."""
    lines = []
    for para in text.split("\n"):
        words, line = para.split(), ""
        for w in words:
            if line and len(line) + 1 + len(w) > 95:
                lines.append(line)
                line = w
            else:
                line = f"{line} {w}" if line else w
        lines.append(line)
    pages = [lines[i : i + 50] for i in range(0, len(lines), 50)] or [[""]]

    def literal(s):
        s = s.encode("latin-1", "replace").decode("latin-1")
        return "(" + s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"

    objects = {1: "<< /Type /Catalog /Pages 2 0 R >>", 3: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica "}
    objects[3] += "/Encoding /WinAnsiEncoding >>"
    objects[4] = f"<< /Title {literal(title)} >>"
    kids = []
    for i, page in enumerate(pages):
        ops = ["BT", "/F1 11 Tf", "72 740 Td", "14 TL"] + [f"{literal(s)} Tj T*" for s in page] + ["ET"]
        stream = zlib.compress("\n".join(ops).encode("latin-1"))
        if i == 0 and first_stream is not None:
            stream = first_stream
        page_id, content_id = 5 + 2 * i, 6 + 2 * i
        objects[content_id] = (f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n", stream)
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{page_id} 0 R")
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for oid in sorted(objects):
        offsets[oid] = out.tell()
        body = objects[oid]
        out.write(f"{oid} 0 obj\n".encode())
        if isinstance(body, tuple):
            out.write(body[0].encode() + body[1] + b"\nendstream")
        else:
            out.write(body.encode("latin-1", "replace"))
        out.write(b"\nendobj\n")
    xref = out.tell()
    size = max(objects) + 1
    out.write(f"xref\n0 {size}\n0000000000 65535 f \n".encode())
    for oid in range(1, size):
        out.write(f"{offsets[oid]:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {size} /Root 1 0 R /Info 4 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def docx_bytes(title, text):
    """A DOCX package: one paragraph per line of the text, the title as a Title-styled paragraph."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    paras = [f'<w:p><w:pPr><w:pStyle w:val="Title"/></w:pPr><w:r><w:t>{xml_escape(title)}</w:t></w:r></w:p>']
    for line in text.split("\n"):
        if line.strip():
            paras.append(f'<w:p><w:r><w:t xml:space="preserve">{xml_escape(line)}</w:t></w:r></w:p>')
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
            'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
        ),
        "word/document.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{w}">'
            f"<w:body>{''.join(paras)}</w:body></w:document>"
        ),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in parts.items():
            z.writestr(name, content)
    return out.getvalue()


def render(kind, title, text):
    if kind == "txt":
        return f"{title}\n\n{text}".encode()
    if kind == "md":
        paras = "\n\n".join(p.strip() for p in text.split("\n") if p.strip())
        return f"# {title}\n\n{paras}\n".encode()
    if kind == "html":
        paras = "".join(f"<p>{xml_escape(p.strip())}</p>\n" for p in text.split("\n") if p.strip())
        head = f"<!doctype html><html><head><title>{xml_escape(title)}</title></head>"
        return f"{head}<body><h1>{xml_escape(title)}</h1>\n{paras}</body></html>\n".encode()
    if kind == "pdf":
        return pdf_bytes(title, text)
    return docx_bytes(title, text)


def deflated(prefix, fill, n):
    """zlib of `prefix` then `n` bytes of `fill`, a mebibyte at a time (never held whole)."""
    c = zlib.compressobj(9)
    parts, block = [c.compress(prefix)], fill * (1 << 20)
    for _ in range(n >> 20):
        parts.append(c.compress(block))
    parts.append(c.flush())
    return b"".join(parts)


def hostile_pool(rng):
    """Malformed and hostile files, each with what docqa must answer: a typed failure naming its reason."""
    bomb_stream = deflated(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n", b" ", 1 << 30)
    bomb_pdf = pdf_bytes("Bomb", "A page of text.", first_stream=bomb_stream)
    docx = io.BytesIO()
    with (
        zipfile.ZipFile(docx, "w", zipfile.ZIP_DEFLATED) as z,
        z.open("word/document.xml", "w", force_zip64=True) as part,
    ):
        part.write(b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>')
        block = b" " * (1 << 20)
        for _ in range(1024):
            part.write(block)
    real_pdf = pdf_bytes("Truncated", "Some text that will be cut off. " * 400)
    files = [
        ("deep.html", "text/html", ("<html><body>" + "<div>" * 100_000 + "deep</body></html>").encode()),
        ("bomb.pdf", "application/pdf", bomb_pdf),
        ("bomb.docx", MIME["docx"], docx.getvalue()),
        (
            "one-line.html",
            "text/html",
            b"<html><body><span>" + b"lorem ipsum dolor sit amet " * (62 << 15) + b"</span>",
        ),
        ("noise.pdf", "application/pdf", b"%PDF-1.7\n" + rng.randbytes(200_000)),
        ("truncated.pdf", "application/pdf", real_pdf[: len(real_pdf) // 2]),
        ("latin1.txt", "text/plain", "Caf\u00e9 cr\u00e8me, na\u00efve fa\u00e7ade.".encode("latin-1") * 100),
        ("empty.txt", "text/plain", b""),
    ]
    return [
        ("hostile", {"id": name, "title": name, "name": name, "mime": mime, "payload": data})
        for name, mime, data in files
    ]


def read_records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def document_pool(data_dir, large_chars):
    """(kind, weight class, record) choices: fixtures and evaluation texts in each format, and long
    transcripts as the slow ones."""
    fixtures = ROOT / "tests" / "fixtures" / "qa"
    squad = read_records(fixtures / "squad2_articles_dev.jsonl")
    fairy = read_records(fixtures / "fairytaleqa_test.jsonl")
    needle = read_records(fixtures / "zh_cmrc_needle.jsonl")
    qmsum_fixture = read_records(fixtures / "qmsum_val.jsonl")
    leval = [r for r in read_records(data_dir / "qa" / "leval_dev.jsonl") if len(r["text"]) < 30000][:12]
    squality = read_records(data_dir / "qa" / "squality_dev.jsonl")[:8]
    meetings = [r for r in read_records(data_dir / "qa" / "qmsum_val.jsonl") if 40000 <= len(r["text"])]
    meetings = [dict(r, text=r["text"][:large_chars]) for r in meetings[:8]]
    pool = {
        "small": [("txt", r) for r in squad + needle]
        + [("md", r) for r in fairy + leval[:6]]
        + [("html", r) for r in squad + leval[6:]],
        "pdf": [("pdf", r) for r in squad + squality],
        "docx": [("docx", r) for r in qmsum_fixture + squality + fairy],
        "large": [("txt", r) for r in meetings],
    }
    return pool
