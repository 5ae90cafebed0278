"""The book: the runner (jupytext -> papermill), its plan, the results it writes and their provenance and staleness,
the HTML pages, and `xmr`, the command line (the top layer of the library; `docs/layout.md`)."""
