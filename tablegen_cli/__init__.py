"""The `tablegen` command line: the top floor, over tablegen_tf, beam_jobs, serving and tfx_pipeline."""
