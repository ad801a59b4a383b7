"""Export: a checkpoint as files other runtimes load, and the code that runs them.

    exporter.py   `nmt-export`: the export directory (graphs or CTranslate2 model, tokenizer,
                  manifest.json, README), written atomically and checked against the model
    graphs/       the models as two pure functions over explicit tensors (encoder, decoder step)
    runtime.py    `ExportedTranslator`: greedy decoding of ONNX/TorchScript graphs without nmt's
                  model code
    ct2.py        CTranslate2: the converter, the decoding options that search as nmt does, and
                  `CT2Translator`

Every translator here reads its input through `nmt.translation.inputs`, as
`nmt.translation.Translator` does, so the same text gives the same model input everywhere.
docs/export.md has the details.
"""
