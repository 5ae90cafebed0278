"""How a run is planned, trained, identified, cached, claimed by a worker, executed, tuned and shipped: the runs
layer, above the science and below the book (`docs/layout.md`)."""
