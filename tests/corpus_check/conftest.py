from corpus_support import corpus_outputs  # noqa: F401  (session fixture shared by the test modules)
