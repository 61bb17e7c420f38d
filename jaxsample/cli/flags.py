"""How the command line reads flags: whole names only (no prefix matching),
negative numbers as values, CleanRL's names as aliases, booleans as CleanRL
users type them, and "did you mean" for every unknown flag.

* Prefixes: every parser is made with ``allow_abbrev=False``: ``--num-env 8``
  is an error naming ``--num-envs``, never taken for it.
* Negative numbers: argparse reads ``--lr -1e-3`` as two flags (``-1e-3``
  looks like one), so `join_negative_values` writes ``--lr=-1e-3`` for
  every flag that takes one value before parsing: the value reaches the
  flag's own check and its message.
* CleanRL's names (`CLEANRL_ALIASES`): ``--learning-rate`` is ``--lr``,
  ``--clip-coef`` is ``--clip-eps``, ``--env-id`` is ``--env``, ...; hidden
  flags with the same destination, so the run's JSON keeps one name, listed
  once in ``--help``'s closing lines (`cleanrl_epilog`); the same names as
  config-file keys (`canonical_keys`). Most of CleanRL's other names
  (``--num-envs``, ``--gae-lambda``, ``--ent-coef``, ...) are ours already.
* Booleans (`BoolFlag`): ``--anneal-lr``, ``--anneal-lr false``,
  ``--anneal-lr=False`` (CleanRL's ``strtobool`` spellings) and
  ``--no-anneal-lr``.
* Errors name the flag as typed (`typed_flags`): ``--learning-rate abc`` is
  an error about ``--learning-rate``, ``--total-timesteps 10`` one about
  ``--total-timesteps`` (not ``--lr``, ``--total-steps``); a value's parse
  error is a `FlagValueError` that the parser names so.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Any

from jaxsample.errors import UsageError

__all__ = [
    "CLEANRL_ALIASES",
    "CLEANRL_SAME",
    "BoolFlag",
    "FlagValueError",
    "canonical_keys",
    "cleanrl_epilog",
    "join_negative_values",
    "parse_bool",
    "typed_flags",
    "unknown_flags_message",
]

#: CleanRL's name -> ours (``learning_rate`` -> ``lr``): a config field, or
#: the train command's own ``env``, ``wandb`` and ``wandb_project``.
CLEANRL_ALIASES = {
    "learning_rate": "lr",
    "clip_coef": "clip_eps",
    "norm_adv": "normalize_advantages",
    "target_network_frequency": "target_update_interval",
    "start_e": "epsilon_init",
    "end_e": "epsilon_final",
    "env_id": "env",
    "track": "wandb",
    "wandb_project_name": "wandb_project",
}
#: CleanRL's names that are ours already (PPO's and DQN's scripts).
CLEANRL_SAME = (
    "total_timesteps", "seed", "num_envs", "num_steps", "gae_lambda", "num_minibatches",
    "update_epochs", "ent_coef", "vf_coef", "max_grad_norm", "anneal_lr", "gamma", "clip_vloss",
    "learning_starts", "batch_size", "exploration_fraction", "tau",
)  # fmt: skip
#: CleanRL's names with no one-to-one counterpart here, and what to use.
CLEANRL_DIFFERENT = {
    "buffer_size": "CleanRL's --buffer-size counts transitions in all; --buffer-capacity "
    "counts them per env here (num_envs * buffer_capacity in all)",
    "train_frequency": "CleanRL's --train-frequency N is one gradient step per N env steps; "
    "here each iteration (--num-envs x --num-steps env steps) takes --gradient-steps",
    "exp_name": "runs are not named here: --checkpoint-dir and --json say where a run goes",
}
#: Config-file keys that are CleanRL names (the command's flags only: not
#: ``track`` / ``wandb_project_name``).
_FILE_ALIASES = {k: v for k, v in CLEANRL_ALIASES.items() if v not in ("wandb", "wandb_project")}

_TRUE = ("true", "yes", "y", "t", "on", "1")
_FALSE = ("false", "no", "n", "f", "off", "0")


def flag(name: str) -> str:
    """``--num-envs`` of ``num_envs``."""
    return "--" + name.replace("_", "-")


class FlagValueError(UsageError):
    """A flag's value that does not parse, raised by its ``type``: the
    parser does not say which of the flag's names was typed, so the message
    is ``problem`` after the name the command line chooses (`named`; default:
    ``--<dest>``).

    Attributes:
      dest: the flag's destination (``lr``, ``total_timesteps``).
      problem: the message after the flag's name (``"'abc': expected float"``).
    """

    def __init__(self, dest: str, problem: str) -> None:
        self.dest, self.problem = dest, problem
        super().__init__(self.named(flag(dest)))

    def named(self, name: str) -> str:
        """The message with ``name`` as the flag's name."""
        return f"{name} {self.problem}"


def typed_flags(argv: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{dest: the name argv gave it}`` for ``parser``'s flags in ``argv``
    (a subcommand's arguments): the last name given for each destination, the
    one whose value argparse keeps (``--learning-rate`` for ``lr``)."""
    names: dict[str, str] = {}
    for token in argv:
        if token == "--":
            break
        action = parser._option_string_actions.get(token.split("=", 1)[0])
        if token.startswith("--") and action is not None:
            names[action.dest] = token.split("=", 1)[0]
    return names


def parse_bool(name: str, text: str) -> bool:
    """``true``/``false`` as CleanRL reads them (``strtobool``: yes/no, 1/0,
    on/off, any case); else a `UsageError` naming the flag."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise UsageError(f"{flag(name)} {text!r}: expected true or false")


class BoolFlag(argparse.Action):
    """A boolean flag: ``--x`` (true), ``--x VALUE`` / ``--x=VALUE`` (true,
    false, yes, no, 1, 0: CleanRL's spellings). Its ``--no-x`` is a separate
    ``store_false`` flag (`add_bool_flag`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        name = kwargs.pop("field", dest)
        super().__init__(
            option_strings,
            dest,
            nargs="?",
            const=True,
            type=lambda text: parse_bool(name, text),
            metavar="BOOL",
            **kwargs,
        )

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)


def add_bool_flag(
    group: Any, name: str, dest: str, help: str, default: Any = argparse.SUPPRESS
) -> None:
    """``--name [BOOL]`` and ``--no-name`` (hidden from ``--help``: the help
    line names it), both setting ``dest``."""
    group.add_argument(flag(name), dest=dest, action=BoolFlag, field=name, default=default,
                       help=help)  # fmt: skip
    group.add_argument(
        "--no-" + flag(name)[2:],
        dest=dest,
        action="store_false",
        default=default,
        help=argparse.SUPPRESS,
    )


def add_aliases(parser: argparse.ArgumentParser, names: set[str] | None = None) -> list[str]:
    """Hidden flags for CleanRL's names of ``parser``'s flags (those whose
    destination is in ``names``, default: all): the same destination, type
    and action as ours. Returns ``["--learning-rate = --lr", ...]``."""
    by_dest: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.option_strings and action.option_strings[0] == flag(action.dest):
            by_dest.setdefault(action.dest, action)
    shown = []
    for alias, ours in CLEANRL_ALIASES.items():
        action = by_dest.get(ours)
        if action is None or (names is not None and ours not in names):
            continue
        if isinstance(action, (BoolFlag, argparse._StoreTrueAction)):
            add_bool_flag(parser, alias, ours, argparse.SUPPRESS, action.default)
        else:
            parser.add_argument(
                flag(alias),
                dest=ours,
                type=action.type,
                default=action.default,
                metavar=action.metavar,
                help=argparse.SUPPRESS,
            )
        shown.append(f"{flag(alias)} = {flag(ours)}")
    return shown


def cleanrl_epilog(parser: argparse.ArgumentParser, same: Sequence[str] = CLEANRL_SAME) -> str:
    """Adds CleanRL's names to ``parser`` (`add_aliases`) and returns the
    closing lines of its ``--help``: the aliases, and CleanRL's names among
    ``same`` that ``parser`` has already."""
    shown = add_aliases(parser)
    options = {o for a in parser._actions for o in a.option_strings}
    same = [flag(n) for n in same if flag(n) in options]
    text = f"CleanRL names accepted: {', '.join(shown)}." if shown else ""
    if same:
        text += f" CleanRL names that are ours already: {', '.join(same)}."
    return text.strip()


def canonical_keys(values: dict[str, Any], path: str) -> dict[str, Any]:
    """A config file's keys with CleanRL's names written as ours
    (``learning_rate = 3e-4`` is ``lr``); both names of one setting is an error."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        ours = _FILE_ALIASES.get(key, key)
        if ours in out:
            raise UsageError(f"--config {path!r}: {ours} is set twice (also as {key})")
        out[ours] = value
    return out


def _takes_one_value(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs is None


def _is_number(text: str) -> bool:
    try:
        float(text.replace("_", ""))
    except ValueError:
        return False
    return True


def join_negative_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with ``--flag -1e-3`` written ``--flag=-1e-3`` for every flag
    of ``parser`` that takes one value and a next token that is a number (or
    a comma-separated list of them) and not a flag: argparse reads what
    begins with ``-`` as a flag unless it looks like ``-1`` or ``-.5``."""
    options = {o for a in parser._actions for o in a.option_strings}
    valued = {o for a in parser._actions if _takes_one_value(a) for o in a.option_strings}
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            out.extend(argv[i:])
            break
        following = argv[i + 1] if i + 1 < len(argv) else None
        if (
            token in valued
            and following is not None
            and following.startswith("-")
            and following not in options
            and all(_is_number(part) for part in following.split(","))
        ):
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def unknown_flags_message(extra: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """The one line for unrecognized arguments: every unknown flag with the
    closest flag of ``parser`` (``did you mean --num-envs?``), or what
    CleanRL's name that has no counterpart here means."""
    options = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})
    flags = [t.split("=")[0] for t in extra if t.startswith("--")]
    notes, hints = [], []
    for name in flags:
        different = CLEANRL_DIFFERENT.get(name[2:].replace("-", "_"))
        if different:
            notes.append(different)
            continue
        close = difflib.get_close_matches(name, options, n=1)
        if close:
            hints.append((name, close[0]))
    message = f"unrecognized arguments: {' '.join(extra)}"
    if hints:
        if len(hints) == 1 and len(flags) == 1:
            message += f" (did you mean {hints[0][1]}?)"
        else:
            message += f" (did you mean {', '.join(f'{c} for {n}' for n, c in hints)}?)"
    if notes:
        message += "; " + "; ".join(notes)
    return message
