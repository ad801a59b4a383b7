"""Pretrained models from elsewhere, imported as nmt checkpoints (`nmt-import`).

importer.py nmt-import: the importer of the model's kind (config.json's model_type)
marian.py   Marian models in the Hugging Face layout (OPUS-MT): config, weights, tokenizer
m2m100.py   M2M-100 models (NLLB-200, M2M-100): languages as code pieces, fairseq positions,
            languages added
trimming.py keep_text: the table cut to the pieces a corpus of the languages in use needs
"""
