"""Data: a corpus's way from files (or the Hugging Face hub) to training batches.

    splits.py     a split read from local files or the hub, as lists or as a stream; pairs
                  encoded into ids
    corpora.py    several corpora or language pairs mixed into one training set (data.corpora)
    languages.py  the language codes of an imported multilingual model in the training pairs
    starts.py     the words that start the training sentences (where a paragraph is cut)
    tokenized.py  the training split tokenized once into memory-mapped Arrow, in the cache
    batches.py    batch plans from the lengths alone, and the padded tensors of one batch
    cache.py      the derived-data cache: entries named by a digest of all they were made from

It builds on the base (`nmt.tokenizer`, `nmt.config`...) alone: training reads it, and so does
the search for its padded batches (`collate`).
"""
