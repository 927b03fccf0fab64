"""Kafka's ssl.principal.mapping.rules: from a client certificate's distinguished name to the user
name of its principal (`User:<name>`).

    RULE:<pattern>/<replacement>/[L|U], RULE:..., DEFAULT

Rules are tried in order; the first whose pattern matches the whole DN (RFC 2253, e.g.
"CN=alice,OU=payments,O=Example") gives the name: the replacement with $1, $2... for the pattern's
groups, lower- or upper-cased with L or U. DEFAULT matches every DN. Kafka's DEFAULT is the whole
DN; here it is the certificate's CN (the DN when it has none), so `User:alice` by default.
A DN no rule matches is refused, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE = re.compile(r"\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)")
_GROUP_REFERENCE = re.compile(r"\$(\d)")


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern | None      # None: DEFAULT
    replacement: str = ""
    case: str = ""                  # "", "L" or "U"

    def apply(self, dn: str, cn: str | None) -> str | None:
        if self.pattern is None:
            return cn or dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        name = _GROUP_REFERENCE.sub(lambda m: match.group(int(m.group(1))) or "", self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of a setting; ValueError naming the part that is not a rule."""
    if not isinstance(text, str):
        raise TypeError(f"must be a string, got {text!r}")
    rules, position = [], 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"not a rule (RULE:pattern/replacement/[LU] or DEFAULT) at {text[position:]!r}")
        pattern, replacement, case, default = match.groups()
        if default:
            rules.append(Rule(None))
        else:
            try:
                rules.append(Rule(re.compile(pattern.replace("\\/", "/")), replacement.replace("\\/", "/"), case))
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        position = match.end()
    if not rules:
        raise ValueError("no rule given (DEFAULT is the CN)")
    return tuple(rules)


def principal_name(rules: tuple[Rule, ...], dn: str, cn: str | None) -> str | None:
    """The user name the first matching rule gives, None if none matches (or the name is empty)."""
    for rule in rules:
        name = rule.apply(dn, cn)
        if name is not None:
            return name or None
    return None
