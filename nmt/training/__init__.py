"""Training: everything `nmt-train` does between its config and its checkpoints.

    setup.py        a run made ready: run directory, corpora, tokenizer, lexicon, model, resume
    trainer.py      the loop (`Trainer`) and `train_main`, what nmt-train calls
    loss.py         label-smoothed cross-entropy with its hand-written backward
    schedule.py     learning-rate schedules
    validation.py   loss, perplexity and BLEU on the validation split
    lexicon.py      IBM Model 1, learned once per run for `decode.shortlist`
    guided.py       guided alignment: eflomal's links, and the attention taught to follow them
    calibration.py  the confidence calibrations fitted at the end of a run
    budget.py       train.max_minutes
    bad_updates.py  NaN/inf, out-of-memory and fp16-overflow updates, skipped and counted
    preemption.py   SIGTERM / Ctrl-C: finish the update, save, exit 0
    resume.py       exact resume and train.init_from, and the settings each must keep
    run_log.py      metrics.jsonl and TensorBoard events
    average.py      nmt-average: the mean of several checkpoints' weights
    plot.py         nmt-plot: training curves from metrics.jsonl

It builds on the base, `nmt.data`, `nmt.models` and `nmt.translation` (validation decodes with
the search), and never on `nmt.serving`, `nmt.export`, `nmt.pretrained` or `nmt.cli`; the
collectives of torchrun are `nmt.distributed`, which nmt-translate's file jobs share.
"""
