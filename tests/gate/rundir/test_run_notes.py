"""What a run directory's manifest says about gates the target could not measure reaches the
run's notes (and so summary.md, the terminal and the HTML report), with the reason."""

import json

from rundir_builder import request_records, write_manifest, write_profile

from gate.rundir.run import load_run


def test_gates_not_measurable_become_run_notes(tmp_path):
    write_manifest(tmp_path, ["steady"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["gates_not_measurable"] = {
        "kv_leak_after_drain": "not measurable on this llamacpp target (kv_blocks_used: gone)",
        "burst_recompute_ratio": "not measurable on this llamacpp target (no counter)",
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    write_profile(tmp_path, "steady", request_records(10))
    notes = load_run(tmp_path).notes
    assert notes == (
        "gate burst_recompute_ratio: not measurable on this llamacpp target (no counter)",
        "gate kv_leak_after_drain: not measurable on this llamacpp target (kv_blocks_used: gone)",
    )


def test_a_run_without_the_list_has_no_such_note(tmp_path):
    write_manifest(tmp_path, ["steady"])
    write_profile(tmp_path, "steady", request_records(10))
    assert not any(n.startswith("gate ") for n in load_run(tmp_path).notes)
