"""The `batchgate` vocabulary: every option two or more verbs take, defined once.

Owns the table of shared options (`OPTIONS`: flag, metavar, default, the help wording every verb
shows, and the per-verb default where a default depends on what the verb does), adding one to a
verb's parser (`add`), the old spellings kept as hidden aliases that warn (`DEPRECATED`), each
verb's exit-code line (`EXIT_CODES`, shown as the epilog of its `--help`) and the `--set` rule
shared by every verb that runs profiles (`profile_sets`). A verb adds a shared option only
through `add`, so this table is what every verb's `--help` says; tests/gate/commands/
test_option_table.py walks every verb's parser against it, `batchgate load` (the load
generator's own parser, which may not import `gate`) included.

It does not validate values (the commands do, after parsing) nor own verb-specific options.

The `--scale` rule: a scale is the length of one measurement of a profile. A verb that measures
each profile once (`run`, `load`) defaults to `quick`; a verb that measures a profile many times
and escalates the promising ones (`sweep` per point, `tune` per candidate) starts at `smoke`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEPRECATED",
    "EXIT_CODES",
    "LOCAL_GATES_DEFAULT",
    "OPTIONS",
    "PROG_ENV",
    "RUN_GATES_DEFAULT",
    "SCALES",
    "Option",
    "add",
    "add_verb",
    "alias",
    "profile_sets",
    "verb_of",
]

SCALES = ("smoke", "quick", "full")

# `batchgate serve` / `batchgate load` exec their program with its name in this variable, so
# that program's --help and errors say the command the user typed (`usage: batchgate load`).
PROG_ENV = "BATCHGATE_PROG"

# What `--gates` defaults to: on a verb that starts a run, and on one that judges a saved run.
LOCAL_GATES_DEFAULT = "default: ./gates.yaml if there is one, else the packaged default"
RUN_GATES_DEFAULT = (
    "default: the run's own RUN_DIR/gates.yaml; ./gates.yaml for a run without a manifest"
)

# Shown by every verb's --help (argparse's epilog), one line each.
_SEE = "(docs/exit-codes.md)"
EXIT_CODES: Mapping[str, str] = {
    "run": "exit codes: 0 every gate passed, 1 a gate failed, 2 usage error, 3 inconclusive, "
    f"4 invalid gates file, 5 no data / invalid measurement / run cut short {_SEE}",
    "serve": "exit codes: 0 stopped cleanly (SIGTERM or Ctrl-C, requests drained), 1 the engine "
    f"died, 2 usage error (a bad flag or value) {_SEE}",
    "load": "exit codes: 0 completed (even with request errors), 2 usage error, 5 target "
    f"unreachable / run interrupted {_SEE}",
    "check": "exit codes: 0 every gate passed, 1 a gate failed, 2 usage error (a missing path "
    "or gates file), 3 inconclusive, 4 invalid gates file, 5 no data / not a readable or a "
    f"damaged run {_SEE}",
    "report": "exit codes: 0 every gate passed, 1 a gate failed, 2 usage error, 3 inconclusive, "
    f"4 invalid gates file, 5 no data / not a readable or a damaged run, as `check` {_SEE}",
    "compare": "exit codes: 0 compared, 2 usage error, 4 invalid gates file, 5 not a readable "
    f"run, no profile in common, or a damaged run {_SEE}",
    "baseline": "exit codes: 0 done, 2 usage error (a missing path, gates file or baseline), "
    f"4 invalid gates file, 5 not a readable or a damaged run {_SEE}",
    "rollback": "exit codes: 0 applied, 2 usage error / unreachable / refused / not the "
    f"bundled server (equivalents printed), 4 invalid gates file {_SEE}",
    "sweep": "exit codes: 0 knee found, 1 not even the lowest rate passes, 2 usage error, "
    f"4 invalid gates file, 5 the target died or the search was interrupted {_SEE}",
    "sample": "exit codes: 0 sampled, 2 usage error or the file cannot be written, 5 nothing "
    f"to sample {_SEE}",
    "init": "exit codes: 0 written, 2 the file exists (without --force) or cannot be written "
    f"{_SEE}",
    "calibrate": "exit codes: 0 calibrated, 2 usage error, 4 invalid gates file, 5 the target "
    f"could not be calibrated {_SEE}",
    "tune": "exit codes: 0 a winner (preset written), 1 no candidate passes every gate, 2 usage "
    "error, 4 invalid gates file, 5 the target died, could not be calibrated, or the search was "
    f"interrupted {_SEE}",
}


@dataclass(frozen=True)
class Option:
    """One shared option. `help` is the wording every verb shows first; a verb may add a
    sentence after it (`add(..., detail=...)`). `defaults` gives a verb its own default where
    the default follows from what the verb does (`--scale`, `--profile`); else `default`."""

    flag: str
    help: str
    metavar: str | None = None
    default: Any = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    env: str | None = None  # the default is this environment variable when it is set
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # type, choices, action, nargs

    def default_for(self, verb: str, environ: Mapping[str, str] = os.environ) -> Any:
        if self.env is not None:
            return environ.get(self.env)
        return self.defaults.get(verb, self.default)

    @property
    def positional(self) -> bool:
        return not self.flag.startswith("-")


OPTIONS: Mapping[str, Option] = {
    "gates": Option("--gates", "the gates file", metavar="FILE", kwargs={"type": Path}),
    "target": Option(
        "--target",
        "base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000",
        metavar="URL",
    ),
    "profile": Option(
        "--profile",
        "traffic profile",
        metavar="NAME",
        defaults={"sweep": "steady"},
    ),
    "set": Option(
        "--set",
        "override one profile parameter (repeat; VALUE is JSON when it parses; dotted KEYs "
        "reach into mappings); without PROFILE. it applies to every profile the command runs",
        metavar="[PROFILE.]KEY=VALUE",
        default=[],
        kwargs={"action": "append"},
    ),
    "scale": Option(
        "--scale",
        "length of one measurement of a profile: smoke (CI, 1/20 of full), quick (1/4) or full; "
        "default %(default)s (quick where each profile is measured once: run, load; smoke where "
        "it is measured again and again: sweep points, tune candidates)",
        defaults={"run": "quick", "load": "quick", "sweep": "smoke", "tune": "smoke"},
        kwargs={"choices": SCALES},
    ),
    # --out: a directory a new run directory is made in, unless the verb writes one file.
    "out": Option(
        "--out",
        "parent directory: the command makes its new directory inside it (default runs/)",
        metavar="DIR",
        default=Path("runs"),
        kwargs={"type": Path},
    ),
    # `batchgate load` writes one profile's records straight into its --out (a run's profile
    # directory): the one --out DIR that is not a parent.
    "out_dir": Option(
        "--out",
        "output directory: requests.jsonl and load.json are written straight into it",
        metavar="DIR",
    ),
    "out_file": Option(
        "--out", "output file (not a directory)", metavar="FILE", kwargs={"type": Path}
    ),
    "run_id": Option("--run-id", "name of the new directory (default: time + random)"),
    "run_dir": Option("run_dir", "a run directory written by `batchgate run`", metavar="RUN_DIR"),
    "baseline": Option("--baseline", "baseline for regression gates", metavar="NAME"),
    "baseline_dir": Option(
        "--baseline-dir", "baseline store (default .batchgate/baselines)", metavar="DIR"
    ),
    "inconclusive": Option(
        "--inconclusive",
        "override the gates file's inconclusive policy",
        kwargs={"choices": ("pass", "fail")},
    ),
    "rollback_target": Option(
        "--rollback-target", "target URL shown in rollback commands", metavar="URL"
    ),
    "preset": Option(
        "--preset",
        "batching preset from the gates file (server flags for the bundled server; PUT "
        "/admin/batching for a --target that has it)",
        metavar="NAME",
    ),
    "api_key": Option(
        "--api-key",
        "API key for the target, sent as a Bearer token (default $BATCHGATE_API_KEY)",
        metavar="KEY",
        env="BATCHGATE_API_KEY",
    ),
    "admin_token": Option(
        "--admin-token",
        "admin token for /admin/* (default $BATCHGATE_ADMIN_TOKEN)",
        metavar="TOKEN",
        env="BATCHGATE_ADMIN_TOKEN",
    ),
}

# Old spellings, hidden from --help, kept for one release: (verb, old flag) -> option key.
DEPRECATED: Mapping[tuple[str, str], str] = {
    ("baseline", "--dir"): "baseline_dir",
    ("run", "--profiles"): "profile",
}


def add_verb(
    subparsers: argparse._SubParsersAction, name: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """The verb's parser, its exit codes as the last line of its --help."""
    return subparsers.add_parser(name, epilog=EXIT_CODES[name], **kwargs)


def add(
    parser: argparse.ArgumentParser,
    key: str,
    verb: str | None = None,
    *,
    detail: str = "",
    dest: str | None = None,
    repeated: bool = False,
    **kwargs: Any,
) -> argparse.Action:
    """Adds shared option `key` to `verb`'s parser with the table's name, metavar, default and
    help (`detail` appended); `kwargs` may add `required` or `choices`, never a default. Adds
    the option's deprecated spellings for this verb as hidden aliases that warn. `repeated`:
    a copy on a sub-command (`baseline save --baseline-dir`), so the option is taken after the
    action too; its default leaves what the verb's parser set."""
    option = OPTIONS[key]
    verb = verb or verb_of(parser)
    if "default" in kwargs:
        raise TypeError(f"{option.flag}: its default is the table's (gate/commands/_options.py)")
    spec: dict[str, Any] = {**option.kwargs, **kwargs}
    spec["help"] = f"{option.help}{'; ' + detail if detail else ''}"
    if option.metavar is not None:
        spec["metavar"] = option.metavar
    if not option.positional:
        spec["default"] = argparse.SUPPRESS if repeated else option.default_for(verb)
        if dest is not None:
            spec["dest"] = dest
    action = parser.add_argument(option.flag, **spec)
    for (old_verb, old_flag), new_key in DEPRECATED.items():
        if old_verb == verb and new_key == key:
            alias(parser, old_flag, action)
    return action


def verb_of(parser: argparse.ArgumentParser) -> str:
    """`run` for the parser of `batchgate run` (and of `batchgate baseline save`: `baseline`)."""
    words = parser.prog.split()
    return words[1] if len(words) > 1 else words[0]


def alias(parser: argparse.ArgumentParser, old_flag: str, new: argparse.Action) -> None:
    """`old_flag` does what `new` does, hidden from --help, and warns on stderr naming the new
    spelling. A sub-command's copy (default SUPPRESS) leaves what the verb's parser set."""
    kind = "append" if isinstance(new, argparse._AppendAction) else "store"
    base = parser._registry_get("action", kind)
    new_flag = new.option_strings[0]

    class Deprecated(base):  # type: ignore[misc, valid-type]
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            print(
                f"{parser.prog}: warning: {option_string} is deprecated and goes in the next "
                f"release; use {new_flag}",
                file=sys.stderr,
            )
            super().__call__(parser, namespace, values, option_string)

    parser.add_argument(
        old_flag,
        action=Deprecated,
        dest=new.dest,
        metavar=new.metavar,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def profile_sets(
    items: Sequence[str], profiles: Sequence[str], known: Iterable[str] = ()
) -> list[str]:
    """`--set` items as PROFILE.KEY=VALUE: an item whose KEY starts with one of `profiles` (the
    profiles the command runs) is that profile's; any other sets KEY on every one of them. One
    that starts with another `known` profile (the gates file's) is kept as it is, so the plan
    refuses it naming that profile, not as an unknown parameter."""
    if not profiles:
        return list(items)
    out: list[str] = []
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or key.partition(".")[0] in {*profiles, *known}:
            out.append(item)  # parse_sets names a malformed item
        else:
            out.extend(f"{name}.{item}" for name in profiles)
    return out
