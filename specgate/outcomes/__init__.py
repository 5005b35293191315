"""The ground floor: the outcome vocabulary every gate and report speaks — asking the
engine and failing a case (``gate``), the judge's checks (``judge``), the run's verdict
(``verdict``). It imports nothing of specgate above it."""
