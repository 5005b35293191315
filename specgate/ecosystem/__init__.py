"""The ecosystem table: install every third-party engine of ``impl/ecosystem/*/``, gate it,
confirm its root causes by hand, and write ``reports/ecosystem.md`` / ``.html`` / ``.json``
and the site ``reports/ecosystem-site/`` (``nox -s ecosystem``, published as ECOSYSTEM.md).

For each engine, in folder order: **install** it (a failure is a row *unavailable* with the
installer's message); **export** its models' tokenizer files into
``$SPECGATE_EXPORT_DIR/<model id>/``; **start its server** when it has one; **gate** it
(``specgate parity --impl ...`` in a subprocess within its budget: a run still going at
its end is interrupted, killed with everything it started and reported *timeout*); read
back its JSON report(s); run its **confirm script** and mark each published root cause
confirmed or not.

| module | what |
|---|---|
| ``spec`` | ``engine.toml`` (``EngineSpec.load``), the placeholders, ``discover`` |
| ``install`` | pip / npm installs, ``install_all`` (``... install``) |
| ``servers`` | an engine's server per model on a free port |
| ``gating`` | one engine's gate run and its row (``run_engine``, ``EngineRun``, ``sample_problem``) |
| ``confirm`` | the confirm scripts and each group's mark |
| ``budgets`` | per-engine budgets from measured costs and the machine's load |
| ``results`` | the table as data (``Table``: rows, machine, problems, subset) |
| ``table`` | the whole table (``run_all``), its files, ``publish`` |
| ``markdown`` / ``page`` | the table as Markdown / HTML (the page and the site's index), without machine paths |
| ``site`` | the table as a static site: the index and a page per engine with its case browser |
| ``remark`` | a saved table read back (``load``), marked again by the confirm entries as they are now (``... remark``) |
| ``cli`` | ``python -m specgate.ecosystem install|run|remark|site`` |
"""

from specgate.ecosystem.confirm import CONFIRMED, FAILS, UNCONFIRMED, ConfirmRun, mark, run_confirm
from specgate.ecosystem.gating import INTERRUPT_GRACE, EngineRun, run_engine, sample_problem
from specgate.ecosystem.install import Install, install, install_all, installed_version
from specgate.ecosystem.results import Table
from specgate.ecosystem.spec import ECOSYSTEM_DIR, EcosystemError, EngineSpec, discover
from specgate.ecosystem.table import export_tokenizers, publish, run_all, write_table
from specgate.outcomes.gate import OUTCOMES

__all__ = [
    "CONFIRMED",
    "ECOSYSTEM_DIR",
    "FAILS",
    "INTERRUPT_GRACE",
    "OUTCOMES",
    "UNCONFIRMED",
    "ConfirmRun",
    "EcosystemError",
    "EngineRun",
    "EngineSpec",
    "Install",
    "Table",
    "discover",
    "export_tokenizers",
    "install",
    "install_all",
    "installed_version",
    "mark",
    "publish",
    "run_all",
    "run_confirm",
    "run_engine",
    "sample_problem",
    "write_table",
]
