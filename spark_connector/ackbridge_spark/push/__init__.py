"""Driver-side source ("push"): readers on the driver receive deliveries and settle them after Spark commits.

:mod:`.source` (the reader), :mod:`.settlement` (its settle-after-commit ledger), :mod:`.partition`
(a planned batch and its read on an executor), :mod:`.write_ahead` (replay files), :mod:`.loss`
(``failOnDataLoss`` by sequence numbers), :mod:`.parallel` and :mod:`.reader_process` (``parallelism=N``).
"""
