"""The broken-gates corpus: every file is exit 4 with a message naming file, line and key path.

Each file's first line says what to expect: `# expect: LINE KEY_PATH FRAGMENT...` ("" = no key).
"""

from pathlib import Path

import pytest

from gate.cli import main
from gate.gates.file import load, loads
from gate.gates.reader import GatesFileError

CORPUS = sorted((Path(__file__).parent / "broken_gates").glob("*.yaml"))


def _expectation(path: Path) -> tuple[int, str, str]:
    header = path.read_text().splitlines()[0]
    assert header.startswith("# expect: "), f"{path.name} lacks its expectation line"
    line, key_path, fragment = header[len("# expect: ") :].split(" ", 2)
    return int(line), "" if key_path == '""' else key_path, fragment


def test_the_corpus_is_not_empty():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_broken_gates_file_names_the_place(path):
    line, key_path, fragment = _expectation(path)
    with pytest.raises(GatesFileError) as caught:
        load(path)
    error = caught.value
    assert (error.path, error.line, error.key_path) == (str(path), line, key_path)
    assert fragment in error.message
    assert str(error).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("path", CORPUS[:6], ids=lambda p: p.stem)
def test_check_exits_4_on_a_broken_gates_file(path, tmp_path, capsys):
    line, _, _ = _expectation(path)
    code = main(["check", str(tmp_path), "--gates", str(path), "--no-write"])
    assert code == 4
    err = capsys.readouterr().err
    assert f"{path}:{line}:" in err.replace("\n", "")


@pytest.mark.parametrize("metric", ["ttft", "e2e", "tpot", "itl", "step_latency"])
def test_a_mean_of_latencies_is_refused_with_a_pointer_to_percentiles(metric):
    text = f'version: 1\ngates:\n  - {{name: g, metric: {metric}, statistic: mean, fail: "< 1s"}}\n'
    with pytest.raises(GatesFileError, match="gate a percentile instead") as info:
        loads(text, path="g.yaml")
    assert "g.yaml:3" in str(info.value) and "statistic" in str(info.value)


def test_a_mean_of_a_share_is_still_judged():
    loads(
        'version: 1\ngates:\n  - {name: e, metric: errors, statistic: mean, fail: "< 1%"}\n',
        path="g.yaml",
    )
