"""One vocabulary: every verb's parser against the table of shared options
(gate/commands/_options.py), the old spellings as warning aliases, exit codes in every --help."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from gate import cli
from gate.commands import _options as options
from gate.commands._options import DEPRECATED, EXIT_CODES, OPTIONS, profile_sets
from loadgen import cli as loadgen_cli

BATCHGATE = Path(sys.executable).parent / "batchgate"
FLAGS = {option.flag for option in OPTIONS.values() if not option.positional}
DESTS = {option.flag.lstrip("-").replace("-", "_") for option in OPTIONS.values()}


@pytest.fixture(autouse=True)
def _no_env_defaults(monkeypatch):
    for option in OPTIONS.values():
        if option.env:
            monkeypatch.delenv(option.env, raising=False)


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser as `batchgate VERB` parses it: the load generator's own for `load`
    (`batchgate load` hands it every flag), each `baseline` action's too."""
    top = cli.build_parser()
    (verbs,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, parser in verbs.choices.items():
        if name in cli.PASS_THROUGH:
            continue
        parsers[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.update({f"{name} {sub}": p for sub, p in action.choices.items()})
    parsers["load"] = loadgen_cli.build_parser()
    return parsers


def _entries_for(action: argparse.Action) -> list[str]:
    flags = set(action.option_strings) or {action.dest}
    return [key for key, option in OPTIONS.items() if option.flag in flags]


def _matches(action: argparse.Action, key: str, verb: str) -> list[str]:
    option = OPTIONS[key]
    wrong = []
    if option.metavar is not None and action.metavar != option.metavar:
        wrong.append(f"metavar {action.metavar!r}, the table says {option.metavar!r}")
    expected = option.default_for(verb.split()[0], environ={})
    suppressed = action.default == argparse.SUPPRESS  # a sub-command's copy
    if not option.positional and not suppressed and action.default != expected:
        wrong.append(f"default {action.default!r}, the table says {expected!r}")
    if not (action.help or "").startswith(option.help):
        wrong.append(f"help {action.help!r} does not start with the table's {option.help!r}")
    choices = tuple(option.kwargs.get("choices") or ())
    if choices and tuple(action.choices or ()) != choices:
        wrong.append(f"choices {action.choices!r}, the table says {choices!r}")
    return wrong


def test_every_shared_option_of_every_verb_is_the_table_s():
    problems, seen = [], set()
    for verb, parser in _verb_parsers().items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue  # an old spelling: the next test
            keys = _entries_for(action)
            if not keys:
                # Another flag for a shared option's destination would be a second spelling.
                if action.dest in DESTS and action.option_strings:
                    problems.append(f"{verb} {action.option_strings}: dest {action.dest}")
                continue
            mismatches = {key: _matches(action, key, verb) for key in keys}
            good = [key for key, wrong in mismatches.items() if not wrong]
            if good:
                seen.update(good)
            else:
                problems.append(f"{verb} {action.option_strings or action.dest}: {mismatches}")
    assert not problems, "\n".join(problems)
    assert seen == set(OPTIONS), f"table entries no verb uses: {set(OPTIONS) - seen}"


def test_the_table_s_options_appear_where_the_issue_found_them_apart():
    parsers = _verb_parsers()

    def flags(verb: str) -> set[str]:
        return {
            s for a in parsers[verb]._actions for s in a.option_strings if a.help != "==SUPPRESS=="
        }

    for verb in ("run", "sweep", "tune", "load"):
        assert {"--profile", "--set", "--scale", "--target", "--api-key"} <= flags(verb), verb
    for verb in ("run", "check", "report", "baseline", "baseline save", "baseline list"):
        assert "--baseline-dir" in flags(verb), verb
    assert "--profiles" not in flags("run") and "--dir" not in flags("baseline")
    defaults = {v: parsers[v].get_default("scale") for v in ("run", "load", "sweep", "tune")}
    assert defaults == {"run": "quick", "load": "quick", "sweep": "smoke", "tune": "smoke"}


def test_every_hidden_option_is_a_listed_old_spelling():
    for verb, parser in _verb_parsers().items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS and action.option_strings:
                old = action.option_strings[0]
                assert (verb.split()[0], old) in DEPRECATED, (verb, old)
                new = OPTIONS[DEPRECATED[(verb.split()[0], old)]]
                assert action.dest == new.flag.lstrip("-").replace("-", "_"), (verb, old)


def test_old_spellings_still_work_and_warn_naming_the_new_one(tmp_path, capsys):
    args = cli.build_parser().parse_args(["run", "--profiles", "burst,steady"])
    assert args.profile == ["burst,steady"]
    assert "--profiles is deprecated" in capsys.readouterr().err
    store = tmp_path / "store"
    for argv in (
        ["baseline", "--dir", str(store), "list"],
        ["baseline", "list", "--dir", str(store)],
    ):
        assert cli.main(argv) == 0
        captured = capsys.readouterr()
        assert f"no baselines in {store}" in captured.out
        assert "--dir is deprecated" in captured.err and "use --baseline-dir" in captured.err


def test_baseline_dir_before_or_after_the_action(tmp_path, capsys):
    for argv in (
        ["baseline", "--baseline-dir", str(tmp_path / "a"), "list"],
        ["baseline", "list", "--baseline-dir", str(tmp_path / "a")],
        # After the action wins, as a later flag does.
        [
            "baseline",
            "--baseline-dir",
            str(tmp_path / "b"),
            "list",
            "--baseline-dir",
            str(tmp_path / "a"),
        ],
    ):
        assert cli.main(argv) == 0
        captured = capsys.readouterr()
        assert f"no baselines in {tmp_path / 'a'}" in captured.out and not captured.err
    assert cli.main(["baseline", "show", "nope", "--baseline-dir", str(tmp_path / "a")]) == 2


def test_api_key_and_admin_token_come_from_the_environment_on_every_verb(monkeypatch):
    monkeypatch.setenv("BATCHGATE_API_KEY", "k1")
    monkeypatch.setenv("BATCHGATE_ADMIN_TOKEN", "t1")
    top = cli.build_parser()
    assert top.parse_args(["run"]).api_key == "k1"
    assert (
        top.parse_args(["rollback", "--target", "http://127.0.0.1:9", "--to", "x"]).admin_token
        == "t1"
    )
    assert loadgen_cli.build_parser().parse_args([]).api_key == "k1"
    assert loadgen_cli.build_parser().parse_args(["--api-key", "k2"]).api_key == "k2"


def test_every_verb_s_help_ends_with_its_exit_codes():
    for verb, parser in _verb_parsers().items():
        text = " ".join(parser.format_help().split()).lower()  # argparse wraps the epilog
        assert "exit codes: 0 " in text, verb
        assert text.rstrip().endswith("(docs/exit-codes.md)") or verb == "load", verb
    assert set(EXIT_CODES) == set(cli.COMMANDS)
    assert "docs/exit-codes.md" in "".join(cli.build_parser().format_help().split())


def test_every_argument_has_help():
    for verb, parser in _verb_parsers().items():
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{verb} {action.option_strings or action.dest}: no help"


@pytest.mark.parametrize(
    ("verb", "words"), [("serve", "the engine died"), ("load", "target unreachable")]
)
def test_pass_through_help_says_batchgate_verb_and_its_exit_codes(tmp_path, verb, words):
    done = subprocess.run(
        [str(BATCHGATE), verb, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: batchgate {verb} ")
    text = " ".join(done.stdout.split()).lower()  # argparse wraps the epilog
    assert "exit codes: 0 " in text and words in text


def test_set_without_a_profile_is_every_run_profile_s():
    assert profile_sets(["seed=3", "burst.rate_rps=2", "extra_body.x=1"], ["burst", "steady"]) == [
        "burst.seed=3",
        "steady.seed=3",
        "burst.rate_rps=2",
        "burst.extra_body.x=1",
        "steady.extra_body.x=1",
    ]
    assert profile_sets(["novalue"], ["burst"]) == ["novalue"]  # parse_sets names it
    # Another profile of the gates file: kept, so the plan says that profile is not run.
    assert profile_sets(["steady.seed=3"], ["burst"], known=["steady"]) == ["steady.seed=3"]


def test_load_takes_run_s_profile_prefix_and_refuses_another_profile(capsys):
    argv = ["--profile", "steady", "--show-profile"]
    assert loadgen_cli.main([*argv, "--set", "steady.seed=41"]) == 0
    assert '"seed": 41' in capsys.readouterr().out
    assert loadgen_cli.main([*argv, "--set", "burst.seed=41"]) == 2
    assert "names profile burst, this load runs steady" in capsys.readouterr().err


def test_a_default_cannot_be_given_outside_the_table():
    with pytest.raises(TypeError, match="table"):
        options.add(argparse.ArgumentParser(prog="batchgate run"), "scale", default="full")


def test_docs_cli_md_names_every_shared_option():
    text = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text(encoding="utf-8")
    for option in OPTIONS.values():
        spelled = f"{option.flag} {option.metavar or ''}".strip()
        if option.positional:
            spelled = option.metavar
        elif option.kwargs.get("choices"):
            spelled = option.flag + " " + "\\|".join(option.kwargs["choices"])
        assert f"`{spelled}" in text, spelled
    for (_, old), _key in DEPRECATED.items():
        assert old in text


def test_run_s_set_without_a_profile_reaches_the_profile_run(tmp_path, capsys):
    # Refused at planning (the value is checked by the load generator), before any server starts.
    argv = ["run", "--profile", "burst", "--set", "seed=x.y", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "profile 'burst'" in err and "'seed' must be a number" in err
    assert list(tmp_path.iterdir()) == []
