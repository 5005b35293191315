"""A JUnit XML of gate records, for ``specgate report merge``: the merged run's CI test
view, as the shards' ``--parity-junit`` files are for each shard.

One ``<testcase>`` per gate case (classname ``stage.model``, name the pytest node id):
``fail`` is a ``<failure>``, ``error`` an ``<error>``; ``refused``, ``n/a`` and
``reference-disagreement`` are ``<skipped>`` with the outcome and the message; ``pass``
is an empty test case."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specgate.safe_io import files
from specgate.safe_io.text_safety import xml_text

MESSAGE_CHARS = 2000  # a message attribute stays one readable line in CI views


def write(records: Sequence[Any], path: Path, name: str = "specgate") -> Path:
    suite = ET.Element("testsuite", name=name, tests=str(len(records)))
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for r in records:
        case = ET.SubElement(
            suite, "testcase", classname=xml_text(f"{r.stage}.{r.model}"), name=xml_text(r.nodeid)
        )
        text = xml_text(r.message)
        message = text.splitlines()[0][:MESSAGE_CHARS] if text else ""
        if r.outcome == "fail":
            ET.SubElement(case, "failure", message=message).text = text
            counts["failures"] += 1
        elif r.outcome == "error":
            ET.SubElement(case, "error", message=message).text = text
            counts["errors"] += 1
        elif r.outcome != "pass":
            ET.SubElement(case, "skipped", message=f"{xml_text(r.outcome)}: {message}")
            counts["skipped"] += 1
    suite.attrib.update({k: str(v) for k, v in counts.items()})
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    files.write_text(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
    return path
