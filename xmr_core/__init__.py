"""xmr_core: the library behind the xmr replication book (data, encoders, losses, metrics, training, results)."""

__version__ = "0.1.0"
