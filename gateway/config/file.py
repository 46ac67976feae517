"""The --config TOML file: read, its top-level keys checked, its tables of plain settings read.

The file is strict: a table or key not known (gateway/config/options.py declares them) is a line of
the ConfigError, never ignored, since a misspelt one would otherwise be dropped without a word
(and in ``[network.authentication]`` a typo would open the door); so is a value of the wrong
TOML type (a number in quotes: `config_values.file_value`). `section` reads a table of plain
settings ([lifecycle], [inference], [network.authentication.jwt]) with every problem it
holds; `table` checks a table's keys. A name close to a known one gets a "did you mean"
(`did_you_mean`: difflib's likeness, as Python's own NameError suggestions).
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from collections.abc import Iterable
from typing import Any

from gateway.config.options import OPTIONS, ConfigError
from gateway.config.values import file_value
from gateway.tuning import TYPO_LIKENESS


TABLES = ("lifecycle", "inference", "network")  # the TOML file's tables besides the options


def did_you_mean(name: str, known: Iterable[str], form: str = "{}") -> str:
    """' (did you mean X?)' with the known name most like `name`, written in `form` as the file
    would write it (`[network.{}]`), or '' when none is alike enough."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=TYPO_LIKENESS)
    return f" (did you mean {form.format(close[0])}?)" if close else ""


def read_file(path: str) -> dict:
    """The TOML file at `path` (its keys are checked by `unknown_settings` and the tables'
    readers: `section`, gateway/config/authentication.py)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                          f"offset {exc.start}); a TOML file is UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError(f"--config {path}: not valid TOML: nested too deeply") from None
    return data


def unknown_settings(data: dict) -> list[str]:
    """The file's top-level tables and keys the gateway does not know, one line each (a
    misspelt one would otherwise be ignored without a word)."""
    options = {opt.name for opt in OPTIONS} | {opt.attr for opt in OPTIONS}
    lines = []
    for key, value in data.items():
        if key in TABLES or key in options:
            continue
        lines.append(f"config {_spelled(key, value)}: unknown table"
                     f"{did_you_mean(key, TABLES, _spelled('{}', value))}; the file's tables are "
                     + ", ".join(f"[{t}]" for t in TABLES) if _is_table(value) else
                     f"config {key}: unknown setting{did_you_mean(key, options)}; the file takes the "
                     "options by their long name (mur-gateway --help)")
    return lines


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and bool(value)
                                       and all(isinstance(v, dict) for v in value))


def _spelled(path: str, value: Any) -> str:
    """A table as the file wrote it: [path], or [[path]] for an array of tables."""
    return f"[{path}]" if isinstance(value, dict) else f"[[{path}]]"


def _table_at(data: dict, path: str) -> dict:
    """The table at dotted `path` (its last part a key of `data`)."""
    raw = data[path.rpartition(".")[2]]
    if not isinstance(raw, dict):
        raise ConfigError(f"config [{path}]: must be a table")
    return raw


def _unknown_keys(raw: dict, path: str, known: tuple[str, ...]) -> list[str]:
    """The keys of the table at `path` that are not `known`, one line each."""
    return [f"config {what}; [{path}] takes {', '.join(known)}" for what in (
        f"{_spelled(path + '.' + name, value)}: unknown table"
        f"{did_you_mean(name, known, _spelled(path + '.{}', value))}" if _is_table(value)
        else f"[{path}] {name}: unknown setting{did_you_mean(name, known)}"
        for name, value in raw.items() if name not in known)]


def table(data: dict, path: str, known: tuple[str, ...]) -> dict:
    """The table at dotted `path` (its last part a key of `data`), whose keys are all `known`."""
    raw = _table_at(data, path)
    unknown = _unknown_keys(raw, path, known)
    if unknown:
        raise ConfigError(*unknown)
    return raw


def section(data: dict, key: str, cls: type) -> Any:
    """[lifecycle], [inference] or [network.authentication.jwt] (`key` its dotted path, the
    last part a key of `data`): each key's value through the parser its field names; every
    unknown key and bad value is a line of the one ConfigError."""
    if key.rpartition(".")[2] not in data:
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls) if "parse" in f.metadata}
    raw = _table_at(data, key)
    problems, values = _unknown_keys(raw, key, tuple(fields)), {}
    for name, value in raw.items():
        try:
            if name in fields:
                values[name] = file_value(fields[name].metadata["parse"], value)
        except ValueError as exc:
            problems.append(f"config [{key}] {name}: {exc}")
    if problems:
        raise ConfigError(*problems)
    return cls(**values)

