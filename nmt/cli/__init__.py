"""The command-line tools: the only code that reads argv and sets up logging.

main.py       the entry points (nmt-train, nmt-evaluate, nmt-translate, nmt-average,
              nmt-plot, nmt-serve, nmt-export) and their --help
compose.py    Hydra composition of configs/ onto the typed schemas of nmt/run_config.py
sweep.py      nmt-train -m: one run per combination of swept values
translate.py  nmt-translate: the REPL and the batch stream (N lines in, N lines out)
evaluate.py   nmt-evaluate: decode a split, score it with sacreBLEU, write the hypotheses
lexicon.py    python -m nmt.cli.lexicon CKPT_DIR: the lexicon of a checkpoint written without one
logs.py       the log handler every command installs (rank 0 only under torchrun)
"""
