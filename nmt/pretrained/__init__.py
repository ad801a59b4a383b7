"""Pretrained models from elsewhere, imported as nmt checkpoints (`nmt-import`).

marian.py   Marian models in the Hugging Face layout (OPUS-MT): config, weights, tokenizer
"""
