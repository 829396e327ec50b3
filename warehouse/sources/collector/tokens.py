"""Bearer tokens for ``strata collect``: a file of ``<token> [<tenant> [gateway=<team>,…|gateway=*]]`` lines,
readable by its owner only.

A token that names a tenant makes that tenant the one of every span sent with it. A gateway's token
(one serving many teams, e.g. a LiteLLM proxy) names its default tenant and the teams its spans may
name through their team attribute (:data:`warehouse.sources.otlp.TEAM_KEYS`), or ``*`` for any team.
Tokens are compared in constant time, and never logged.
"""

from __future__ import annotations

import hmac
import stat
from dataclasses import dataclass
from pathlib import Path

from warehouse.settings import ConfigError

MIN_TOKEN_CHARS = 16
_GATEWAY = "gateway="
#: A token's tenant and teams travel with each spooled body in at most this many bytes.
_MAX_CLAIM_BYTES = 60_000


@dataclass(frozen=True)
class Token:
    """One line of the tokens file."""

    secret: bytes
    tenant: str | None
    #: A gateway's teams, comma-separated as written (``*``: any team); ``None`` for an ordinary token.
    gateway: str | None = None


@dataclass(frozen=True)
class Tokens:
    """The accepted tokens; :meth:`check` answers which one a header carries."""

    tokens: tuple[Token, ...]

    def check(self, authorization: bytes | None) -> Token | None:
        """The token of an ``Authorization`` header value (``None``: none); every token is compared, in constant
        time."""
        scheme, _, presented = (authorization or b"").partition(b" ")
        presented = presented.strip()
        found: Token | None = None
        for token in self.tokens:
            if hmac.compare_digest(token.secret, presented) and scheme.lower() == b"bearer":
                found = token
        return found


def load_tokens(path: Path) -> Tokens:
    """Read a tokens file; refuses one that others can read, and malformed lines (by line number)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"STRATA_COLLECT_TOKENS_FILE names {path}, which does not exist") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): run chmod 600 {path}")
    tokens = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = [] if raw.lstrip().startswith("#") else raw.split()
        if not fields:
            continue
        if len(fields) > 3 or len(fields[0]) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"{path} line {number}: expected '<token> [<tenant> [gateway=<team>,…]]' with a token of at least "
                f"{MIN_TOKEN_CHARS} characters"
            )
        tokens.append(Token(fields[0].encode(), fields[1] if len(fields) > 1 else None, _gateway(fields, path, number)))
    if not tokens:
        raise ConfigError(f"{path} holds no token: add lines of '<token> [<tenant>]'")
    return Tokens(tuple(tokens))


def _gateway(fields: list[str], path: Path, number: int) -> str | None:
    """The teams of a line's ``gateway=`` field (``None`` when it has none); refuses one that names no team."""
    if len(fields) == 2 and fields[1].startswith(_GATEWAY):
        raise ConfigError(
            f"{path} line {number}: a gateway's token names its default tenant first: "
            f"'<token> <default-tenant> {fields[1]}'"
        )
    if len(fields) < 3:
        return None
    teams = fields[2].removeprefix(_GATEWAY)
    if not fields[2].startswith(_GATEWAY) or not all(teams.split(",")) or ("*" in teams and teams != "*"):
        raise ConfigError(
            f"{path} line {number}: expected 'gateway=<team>,<team>…' (teams separated by commas, no spaces) "
            f"or 'gateway=*' after the default tenant, not {fields[2]!r}"
        )
    if len(f"{fields[1]} {teams}".encode()) > _MAX_CLAIM_BYTES:
        raise ConfigError(f"{path} line {number}: the gateway's teams take more than {_MAX_CLAIM_BYTES} bytes")
    return teams
