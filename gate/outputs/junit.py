"""JUnit XML of an evaluation: one testcase per verdict.

fail -> <failure>, no data / invalid measurement -> <error>, inconclusive -> <skipped>; pass,
warn and monitors pass (warn and monitor findings go to <system-out>). Every message carries
value, threshold, n, interval and baseline delta. It does not decide verdicts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gate.outputs.text import describe
from gate.verdicts.verdict import Evaluation, Status

__all__ = ["to_xml"]


def to_xml(evaluation: Evaluation) -> str:
    suite = ET.Element("testsuite", name="batchgate")
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for verdict in evaluation.verdicts:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"batchgate.{verdict.profile or 'run'}",
            name=verdict.id,
        )
        message = describe(verdict, evaluation)
        if verdict.monitor:
            ET.SubElement(case, "system-out").text = f"monitor ({verdict.status.value}): {message}"
            continue
        if verdict.status is Status.FAIL:
            ET.SubElement(case, "failure", message=message, type="gate_failed").text = message
            counts["failures"] += 1
        elif verdict.status is Status.NO_DATA:
            ET.SubElement(case, "error", message=message, type="no_data").text = message
            counts["errors"] += 1
        elif verdict.status is Status.INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=f"inconclusive: {message}")
            counts["skipped"] += 1
        else:
            ET.SubElement(case, "system-out").text = f"{verdict.status.value}: {message}"
    suite.set("tests", str(len(evaluation.verdicts)))
    for key, value in counts.items():
        suite.set(key, str(value))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
