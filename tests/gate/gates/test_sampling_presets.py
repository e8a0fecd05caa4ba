"""The batch-alignment preset keys (issue 39): typed in a gates file, and what they mean on
servers that cannot take them (no setting: their rollback values are those servers' own)."""

import pytest

from gate.gates.file import loads
from gate.gates.reader import GatesFileError
from gate.rollback.equivalents import equivalent_settings

_FILE = """
version: 1
presets:
  safe: {sampling_alignment: mixed, shared_sampler_seed: false}
  strict: {sampling_alignment: %s}
gates:
  - {name: g, metric: errors, statistic: count, fail: "== 0"}
"""


def test_sampling_alignment_takes_mixed_or_strict() -> None:
    presets = loads(_FILE % "strict", path="g.yaml").presets
    assert presets["strict"] == {"sampling_alignment": "strict"}
    assert presets["safe"] == {"sampling_alignment": "mixed", "shared_sampler_seed": False}
    with pytest.raises(GatesFileError, match="sampling_alignment: must be one of mixed, strict"):
        loads(_FILE % "loose", path="g.yaml")


def test_other_servers_have_no_setting_for_the_alignment_keys() -> None:
    found = equivalent_settings({"sampling_alignment": "mixed", "shared_sampler_seed": False})
    for server, rows in found.items():
        assert [r.key for r in rows] == ["sampling_alignment", "shared_sampler_seed"], server
        assert all(r.setting is None and "no setting" in (r.note or "") for r in rows)
