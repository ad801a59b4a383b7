"""Documents: text that is more than one sentence a line, translated with its markup kept.

    sentences.py  a text's sentences (sentencex) and the text put back around their translations
    inline.py     inline codes (tags, comments, protected spans) lifted out of a block
    placing.py    inline codes put back by the word alignment, well-formed
    protect.py    protected spans: URLs, e-mail addresses, placeholders, numbers, your patterns
    alignment.py  word alignments from a translation's cross-attention (Moses i-j)
    blocks.py     blocks as the search sees them: split into sentences, rejoined, codes put back
    recovery.py   sentences the model skipped part of, found in its attention and cut
    job.py        the text loop (TextJob): which searches a round needs, their results taken,
                  without I/O; translate_blocks, its blocking driver (nmt-serve's is async)
    texts.py      texts in a format (a line, an HTTP text): text, html, xml, markdown
    segments.py   a text file as segments and the bytes around them; the file written back
    markdown.py   Markdown's inline syntax as codes, and a file's segments (markdown-it-py)
    formats.py    the one table of file formats: by extension or format=, each a module
    package.py    zip-based files read within budgets, written back changing only some members
    runs.py       a paragraph's formatted runs as codes, and a translation put back on them
    html.py srt.py        HTML and SubRip files' segments: what is not text is kept
    word.py pptx.py xlsx.py opendocument.py epub.py   Word, PowerPoint, Excel, OpenDocument and
                  EPUB packages: their paragraphs, every other member the same bytes
    xliff.py po.py        XLIFF 1.2/2.x and gettext PO: a target per unit, codes and
                  placeholders kept
    files.py      a document file opened by its format, its segments translated, the file written

It sees the translator only through `nmt.translation`: the model translates sentences, as it
always does. docs/documents.md has the formats, the measurements and the limits.
"""
