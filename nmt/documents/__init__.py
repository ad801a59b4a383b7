"""Documents: text that is more than one sentence a line, translated with its markup kept.

    sentences.py  a text's sentences (sentencex) and the text put back around their translations
    inline.py     inline codes (tags, protected spans): lifted out of a block, put back by the
                  word alignment, well-formed
    protect.py    protected spans: URLs, e-mail addresses, placeholders, numbers, your patterns
    alignment.py  word alignments from a translation's cross-attention (Moses i-j)
    blocks.py     blocks translated: split, searched as one batch, rejoined, codes put back
    texts.py      texts in a format (a line, an HTTP text): text, html, xml, markdown
    segments.py   a text file as segments and the bytes around them; the file written back
    markdown.py   Markdown's inline syntax as codes, and a file's segments (markdown-it-py)
    html.py srt.py word.py   HTML, SubRip and Word files' segments: what is not text is kept
    files.py      which format a file is, its segments translated, the file written

It sees the translator only through `nmt.translation`: the model translates sentences, as it
always does. docs/documents.md has the formats, the measurements and the limits.
"""
