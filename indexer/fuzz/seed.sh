#!/usr/bin/env bash
# Fills indexer/fuzz/corpus/<target>/ with seed inputs for the five parser fuzz targets, from the
# repository's own test inputs: excerpts of the QA fixtures (tests/fixtures/qa, English and Chinese),
# the repository's Markdown files, and PDFs and DOCX packages built the way the parser tests build
# theirs (indexer/tests/parse_support: text pages with a title, an image-only page, explicit and
# rendered page breaks, tables, a title style), plus the edge cases the parsers handle (byte-order
# marks, UTF-16, form feeds, front matter, hidden HTML, compressed streams). Idempotent: seeds are
# named by content, and inputs the fuzzer added to a corpus are kept. Needs only Python 3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
exec python3 - "$repo" "$here/corpus" <<'PY'
import hashlib, io, json, os, sys, zipfile, zlib

repo, out = sys.argv[1], sys.argv[2]
count = {}

def seed(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)
    count[target] = count.get(target, 0) + 1

def fixture_texts(name, n, chars):
    texts = []
    with open(os.path.join(repo, "tests/fixtures/qa", name), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            text = row.get("text") or row.get("context") or row.get("transcript") or ""
            if isinstance(text, list):
                text = "\n".join(map(str, text))
            if text:
                texts.append((row.get("title", ""), text[:chars]))
            if len(texts) == n:
                break
    return texts

english = fixture_texts("squad2_articles_dev.jsonl", 3, 1500)
chinese = fixture_texts("zh_cmrc_needle.jsonl", 2, 600)
tales = fixture_texts("fairytaleqa_test.jsonl", 1, 1200)
meeting = fixture_texts("qmsum_val.jsonl", 1, 1200)
passages = english + chinese + tales + meeting

# Plain text: fixture excerpts, pages at form feeds, byte-order marks, UTF-16, CRLF, odd spaces.
for title, text in passages:
    seed("text", text)
seed("text", "\f".join(t for _, t in english))
seed("text", "\ufeff" + chinese[0][1])
seed("text", b"\xff\xfe" + english[0][1][:400].encode("utf-16-le"))
seed("text", b"\xfe\xff" + chinese[0][1][:200].encode("utf-16-be"))
seed("text", "Line one\r\nline\u00a0two\r\rCafe\u0301 \u200b\u00ad soft\u2028next\u2029para\x0b\x0c")
seed("text", "\f\f\fonly the last page has text")

# Markdown: the repository's own documents (cut), and the constructs the parser reads.
for name in ["tests/fixtures/README.md", "README.md", "EVAL.md", "BENCHMARKS.md"]:
    with open(os.path.join(repo, name), encoding="utf-8") as f:
        seed("markdown", f.read()[:3000])
seed("markdown", "---\ntitle: \"Front matter title\"\nauthor: x\n---\n\n# Heading one\n\nA *para* with `code`, ~~strike~~ and ![alt text](i.png).\n\n- [ ] task\n- [x] done\n  1. nested\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quote\n\n```rust\nfn main() {}\n```\n\n<div>raw html</div>\n\nHard  \nbreak\n\n---\n\n## Two\n")
seed("markdown", "## Only a second-level heading\n\n" + chinese[1][1])
for title, text in english[:2]:
    seed("markdown", f"# {title}\n\n" + text.replace(". ", ".\n\n", 3))

# HTML: the test page of parse_formats.rs, the constructs the walker reads, fixture text.
seed("html", """<!DOCTYPE html><html><head><title>  The   Title </title><style>p{color:red}</style>
<script>var x = "<div>";</script></head><body><h1>Heading</h1><p>First <b>bold</b> paragraph.</p>
<div hidden>hidden</div><p aria-hidden="true">aria</p><p style="display: none">none</p>
<span style="visibility:hidden">vis</span><noscript>ns</noscript><template><p>t</p></template>
<table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr></table>
<pre>  keep   spaces
  here</pre><ul><li>one<li>two</ul><br>after break<img src=x alt=y><!-- comment <div> -->
<svg><path d='M0 0'/></svg><select><option>o</select><textarea>t</textarea></body></html>""")
seed("html", "<html><body>" + "".join(f"<p>{t}</p>" for _, t in english[:2]) + "</body></html>")
seed("html", "<!doctype html><meta charset=utf-8><h1>" + chinese[0][0] + "</h1><div>" + chinese[0][1] + "</div>")
seed("html", "<div>" * 40 + "deep" + "</div>" * 40)
seed("html", "<p>unclosed <b><i>tags<p>next &amp; &lt;entity&gt; &#x4e2d; &nbsp;")
seed("html", b"\xff\xfe" + "<html><title>UTF-16</title><p>text</p></html>".encode("utf-16-le"))
seed("html", "<frameset><frame></frameset><math><mi>x</mi></math><xmp><b></xmp><plaintext><p>")

# PDF: whole files like parse_support's builders, plus content streams (the target wraps those).
def pdf(objects, root=1, info=None, trailer_extra=b""):
    body = b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n"
    offsets = []
    for i, obj in enumerate(objects):
        offsets.append(len(body))
        body += b"%d 0 obj\n" % (i + 1) + obj + b"\nendobj\n"
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for o in offsets:
        body += b"%010d 00000 n \n" % o
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objects) + 1, root)
    if info:
        trailer += b" /Info %d 0 R" % info
    trailer += trailer_extra + b" >>"
    body += b"trailer\n" + trailer + b"\nstartxref\n%d\n%%%%EOF\n" % xref
    return body

def stream(data, dict_extra=b"", compress=False):
    if compress:
        data = zlib.compress(data)
        dict_extra += b" /Filter /FlateDecode"
    return b"<< /Length %d%s >>\nstream\n" % (len(data), dict_extra) + data + b"\nendstream"

def esc(s):
    return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1", "replace")

def content(lines):
    ops = b"BT\n/F1 12 Tf\n72 720 Td\n"
    for i, line in enumerate(lines):
        if i:
            ops += b"0 -16 Td\n"
        ops += b"(" + esc(line) + b") Tj\n"
    return ops + b"ET"

def text_pdf(title, pages, compress=False, title_bytes=None):
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, 4 info, then (page, content) pairs
    kids = b" ".join(b"%d 0 R" % (5 + 2 * i) for i in range(n))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [" + kids + b"] /Count %d /MediaBox [0 0 612 792] >>" % n,
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Title " + (title_bytes or b"(" + esc(title) + b")") + b" >>"]
    for i, lines in enumerate(pages):
        objs.append(b"<< /Type /Page /Parent 2 0 R /Contents %d 0 R /Resources << /Font << /F1 3 0 R >> >> >>" % (6 + 2 * i))
        objs.append(stream(content(lines), compress=compress))
    return pdf(objs, info=4, trailer_extra=b" /ID [<646f637161> <646f637161>]")

def sentences(text, n):
    parts = [p.strip() for p in text.replace("\n", " ").split(". ") if p.strip()]
    return [p[:90] for p in parts[:n]] or ["x"]

seed("pdf", text_pdf("Quarterly report", [["The first page says hello.", "A second line."],
                                           ["Page two has its own sentence."], [], ["Last page."]]))
seed("pdf", text_pdf(english[0][0], [sentences(english[0][1], 6), sentences(english[1][1], 4)], compress=True))
seed("pdf", text_pdf("", [["UTF-16 title in the info dictionary"]],
                     title_bytes=b"<FEFF" + "Titel \u00e9".encode("utf-16-be").hex().upper().encode() + b">"))
image = bytes((i * 4) % 256 for i in range(64))
seed("pdf", pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                 b"<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 612 792] >>",
                 b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /XObject << /Im1 5 0 R >> >> >>",
                 stream(b"q 400 0 0 400 100 200 cm /Im1 Do Q"),
                 stream(image, b" /Type /XObject /Subtype /Image /Width 8 /Height 8 /ColorSpace /DeviceGray /BitsPerComponent 8")]))
seed("pdf", content(sentences(tales[0][1], 5)))
seed("pdf", b"BT /F1 10 Tf 1 0 0 1 50 700 Tm [(Kerned) -250 (text)] TJ T* (next) ' 2 3 (quoted) \" ET")
seed("pdf", b"q 1 0 0 1 0 0 cm BT /F1 12 Tf 14 TL 72 700 Td (a) Tj T* <48656c6c6f> Tj ET Q")

# DOCX: whole packages like parse_support's builder, plus document.xml bodies (the target packs
# those; after a NUL byte comes docProps/core.xml).
CT = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
RELS = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'
HEAD = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">'
CORE = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'

def para(text, style=None):
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{props}<w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'

def table(rows):
    return "<w:tbl><w:tblPr/>" + "".join(
        "<w:tr>" + "".join(f"<w:tc><w:tcPr/>{para(c)}</w:tc>" for c in row) + "</w:tr>" for row in rows) + "</w:tbl>"

PAGE_BREAK = '<w:p><w:r><w:br w:type="page"/></w:r></w:p>'

def document(body):
    return f"{HEAD}<w:body>{body}</w:body></w:document>"

def core(title):
    return f"{CORE}<dc:title>{title}</dc:title></cp:coreProperties>"

def docx(body, title=None, compress=zipfile.ZIP_DEFLATED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as z:
        z.writestr("[Content_Types].xml", CT)
        z.writestr("_rels/.rels", RELS)
        z.writestr("word/document.xml", document(body))
        if title is not None:
            z.writestr("docProps/core.xml", core(title))
    return buf.getvalue()

body_tables = (para("Report", "Title") + para("First paragraph &amp; more.") +
               table([["Name", "Value"], ["alpha", "1"]]) + PAGE_BREAK + para("Second page."))
body_rendered = (para("One") + '<w:p><w:r><w:lastRenderedPageBreak/><w:t>Two</w:t><w:tab/><w:t>tabbed</w:t><w:br/><w:cr/></w:r></w:p>'
                 + PAGE_BREAK + para("Three"))
body_special = ('<w:p><w:r><mc:AlternateContent><mc:Choice><w:t>choice</w:t></mc:Choice><mc:Fallback><w:t>fallback</w:t></mc:Fallback></mc:AlternateContent></w:r></w:p>'
                '<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> PAGE </w:instrText></w:r><w:r><w:delText>deleted</w:delText></w:r><w:r><w:t>kept &#x4e2d; &#65;</w:t></w:r></w:p>'
                + "<w:tbl><w:tr><w:tc>" + table([["inner", "cell"]]) + para("outer") + "</w:tc></w:tr></w:tbl>")
body_fixture = "".join(para(s) for s in sentences(english[2][1], 8)) + para(chinese[1][1][:300], "Heading1")
seed("docx", docx(body_tables, "Core &amp; title"))
seed("docx", docx(body_rendered))
seed("docx", docx(body_special, "Special", zipfile.ZIP_STORED))
seed("docx", docx(body_fixture))
for body, title in [(body_tables, "Core title"), (body_rendered, None), (body_special, None), (body_fixture, None)]:
    raw = document(body).encode()
    if title is not None:
        raw += b"\0" + core(title).encode()
    seed("docx", raw)

for target in ["pdf", "docx", "html", "markdown", "text"]:
    d = os.path.join(out, target)
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"seeded {target}: {count.get(target, 0)} seeds, corpus now {len(os.listdir(d))} files, {total} bytes")
PY
