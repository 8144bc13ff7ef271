"""TFX pipeline: ExampleGen (our readers) -> StatisticsGen -> SchemaGen -> ExampleValidator
-> Trainer -> Evaluator (BLEU gate) -> Pusher.

Modules stay import-light at package level (`tfx_pipeline.cli` is imported by
`tablegen --help`); TFX itself is imported only where a pipeline is built or run.
"""
