"""Profiles: strict TOML files (``tomllib``) found on the design §7 search path.

Search order for ``--profile NAME``: ``--profile-file`` (that file, whatever NAME says), then
``$XDG_CONFIG_HOME/superinfer/profiles/NAME.toml`` (default ``~/.config``), ``/etc/superinfer/profiles/``,
``<sys.prefix>/share/superinfer/profiles/`` and finally the ``profiles/`` directory bundled next to the
package. The first file found wins; files are never merged.

Invariants: a :class:`Profile` holds only keys of :mod:`superinfer.daemon.schema`, each of the right type
and within bounds, and tenant names that are unique and valid; anything else raises
:class:`ProfileError`, whose message names the file, the key and what was expected.
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from superinfer.daemon import parallel
from superinfer.daemon.schema import NAME_RE, SCHEMA, TENANT_KEYS, SchemaError, check_value

SYSTEM_DIR = Path("/etc/superinfer/profiles")
parallel.register(SCHEMA)  # [engine] tensor/pipeline/executor keys, defined with their checks in daemon.parallel


class ProfileError(ValueError):
    """A profile could not be found or is invalid. The CLI exits 2 on it."""

    def __init__(self, path: str | os.PathLike[str] | None, key: str | None, message: str) -> None:
        where = ": ".join(str(p) for p in (path, key) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = None if path is None else str(path)
        self.key = key


@dataclass
class Profile:
    """The validated contents of one profile file: only the keys it sets, plus its tenants."""

    name: str
    path: Path
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    tenants: list[dict[str, Any]] = field(default_factory=list)


def bundled_dir() -> Path:
    """``profiles/`` next to the package (source checkout or editable install)."""
    return Path(__file__).resolve().parent.parent.parent / "profiles"


def search_dirs() -> list[Path]:
    """Directories searched for ``NAME.toml``, first match wins."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(xdg) / "superinfer" / "profiles", SYSTEM_DIR,
            Path(sys.prefix) / "share" / "superinfer" / "profiles", bundled_dir()]


def find_profile(name: str, profile_file: str | os.PathLike[str] | None = None) -> Path:
    """The file for profile ``name``; raises :class:`ProfileError` naming every place looked at."""
    if profile_file is not None:
        path = Path(profile_file)
        if not path.is_file():
            raise ProfileError(path, None, "--profile-file: no such file")
        return path
    if not NAME_RE.match(name or ""):
        raise ProfileError(None, "--profile", f"expected a profile name ([A-Za-z0-9_.-]), got {name!r}")
    looked = []
    for d in search_dirs():
        path = d / f"{name}.toml"
        if path.is_file():
            return path
        looked.append(str(path))
    raise ProfileError(None, "--profile", f"no profile {name!r}; looked in: {', '.join(looked)}")


def available_profiles() -> dict[str, Path]:
    """Every profile name on the search path and the file that would be used for it."""
    found: dict[str, Path] = {}
    for d in search_dirs():
        if d.is_dir():
            for path in sorted(d.glob("*.toml")):
                found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def load_profile(path: str | os.PathLike[str], name: str | None = None) -> Profile:
    """Read and validate one profile file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(path, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(path, None, f"not UTF-8 text: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(path, None, f"invalid TOML: {exc}") from None
    return validate_profile(raw, path, name or path.stem)


def validate_profile(raw: dict[str, Any], path: Path, name: str) -> Profile:
    """Check a decoded TOML document against the schema."""
    prof = Profile(name=name, path=path)
    known = sorted(set(SCHEMA) | {"tenants"})
    for section, body in raw.items():
        if section == "tenants":
            prof.tenants = _tenants(body, path)
            continue
        if section not in SCHEMA:
            raise ProfileError(path, section, f"unknown section; expected one of {', '.join(known)}")
        if not isinstance(body, dict):
            raise ProfileError(path, section, f"expected a table [{section}], got {body!r}")
        keys = SCHEMA[section]
        values: dict[str, Any] = {}
        for key, value in body.items():
            full = f"{section}.{key}"
            if key not in keys:
                raise ProfileError(path, full, f"unknown key; [{section}] takes {', '.join(sorted(keys))}")
            try:
                values[key] = check_value(keys[key], value)
            except SchemaError as exc:
                raise ProfileError(path, full, str(exc)) from None
        prof.values[section] = values
    return prof


def _tenants(body: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(body, list) or not all(isinstance(t, dict) for t in body):
        raise ProfileError(path, "tenants", "expected an array of tables ([[tenants]] with name = ...)")
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(body):
        here = f"tenants[{i}]"
        for key, value in entry.items():
            if key not in TENANT_KEYS:
                raise ProfileError(path, f"{here}.{key}", f"unknown key; a tenant takes {', '.join(TENANT_KEYS)}")
            try:
                entry[key] = check_value(TENANT_KEYS[key], value)
            except SchemaError as exc:
                raise ProfileError(path, f"{here}.{key}", str(exc)) from None
        if "name" not in entry:
            raise ProfileError(path, f"{here}.name", "missing; expected a tenant name")
        tname = entry["name"]
        if not NAME_RE.match(tname):
            raise ProfileError(path, f"{here}.name", f"expected a name of [A-Za-z0-9_.-] (up to 64), got {tname!r}")
        if tname in seen:
            raise ProfileError(path, f"{here}.name", f"duplicate tenant {tname!r} (also tenants[{seen[tname]}])")
        seen[tname] = i
        out.append(dict(entry))
    return out
