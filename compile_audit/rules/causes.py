"""Upstream causes: one explanation, written once, for the signatures it names across many cases.

A cause is a ``[causes.<name>]`` table of the budgets file::

    [causes.deprecation-wrapper]
    note = "transformers' deprecate_kwarg wrapper guards on the call's kwargs: ..."   # a person's words
    link = "https://github.com/huggingface/transformers/issues/..."                # optional
    signatures = ["wrapped_func at transformers/utils/deprecation.py: *"]
    known_failures = ["*: recompile limit at wrapped_func at transformers/utils/deprecation.py"]   # optional
    in_cases = ["*/gradient-checkpointing*"]                                        # optional, with allows
    allows = ["transformers/utils/generic.py in wrapper: gb0291 via peft/tuners/tuners_utils.py in forward"]
    at_most = 1                                                                     # optional, default 1

``known_failures`` name the known failures the cause explains, as ``<case id>: <what it holds>`` (``raises
KeyError``, ``recompile limit at <frame>``, ``check <name>``): such an entry needs no reason of its own.

``allows`` is a shared budget, written once: in every case whose id matches a pattern of ``in_cases``, up to
``at_most`` roots (or unexpected recompiles) with each identity it lists are the cause's, and the case's own
entry neither counts nor lists them. One more than that and they all count against the entry, which must then
list the identity. An allowance never asks to be tightened in a case that does not show it: it is a ceiling for
a whole scenario (every method's gradient-checkpointing case meets the same root in transformers), and each
identity it lists must be one the cause's ``signatures`` explain.
A pattern matches a break or recompile signature whole; ``*`` stands for any text and nothing else is special.
A cause with an empty note is a proposal: ``--update-budgets`` writes one for each signature no cause explains,
and a person writes its note (or folds its signatures into a cause that exists).
"""

from __future__ import annotations

import dataclasses
import functools
import re

PROPOSED_PREFIX = "unexplained: "  # the name --update-budgets gives a proposed cause


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def matches(pattern: str, signature: str) -> bool:
    return _compiled(pattern).fullmatch(signature) is not None


@dataclasses.dataclass(frozen=True)
class Allowance:
    """Up to ``at_most`` roots or unexpected recompiles named ``identity`` in a case, budgeted by ``cause``."""

    identity: str
    at_most: int
    cause: str


@dataclasses.dataclass(frozen=True)
class Cause:
    name: str
    note: str  # "" for a proposal nobody has explained yet
    signatures: tuple[str, ...]  # patterns
    link: str = ""
    line: int | None = None
    known_failures: tuple[str, ...] = ()  # patterns over known-failure identities (compile_audit.rules.budgets)
    in_cases: tuple[str, ...] = ()  # patterns over case ids where ``allows`` applies
    allows: tuple[str, ...] = ()  # root identities or recompile signatures, exact
    at_most: int = 1  # per identity and case

    def allowances_for(self, case_id: str) -> tuple[Allowance, ...]:
        """What the cause allows in this case (nothing unless the case id matches ``in_cases``)."""
        if not any(matches(pattern, case_id) for pattern in self.in_cases):
            return ()
        return tuple(Allowance(identity, self.at_most, self.name) for identity in self.allows)

    @property
    def explained(self) -> bool:
        return bool(self.note)

    def explains(self, signature: str) -> bool:
        return any(matches(pattern, signature) for pattern in self.signatures)

    def explains_known_failure(self, identity: str) -> bool:
        return any(matches(pattern, identity) for pattern in self.known_failures)

    def describe(self) -> str:
        if not self.explained:
            return f"cause {self.name!r}: not explained yet (a person writes its note)"
        link = f" ({self.link})" if self.link else ""
        return f"cause {self.name!r}: {self.note}{link}"


def causes_of(signature: str, causes: dict[str, Cause]) -> list[Cause]:
    return [cause for cause in causes.values() if cause.explains(signature)]


def signature_site(signature: str) -> str:
    """Where a signature points, for grouping proposals: a break's ``file in function``, a recompile's frame."""
    return signature.split(": ", 1)[0]


def propose(signatures: list[str], causes: dict[str, Cause]) -> dict[str, Cause]:
    """Proposed causes (name -> cause) for the signatures no cause names yet, one per site, merged with the
    proposals already in ``causes``."""
    proposals: dict[str, Cause] = {}
    for signature in sorted(set(signatures)):
        if causes_of(signature, causes) or any(c.explains(signature) for c in proposals.values()):
            continue
        name = PROPOSED_PREFIX + signature_site(signature)
        current = proposals.get(name) or causes.get(name) or Cause(name=name, note="", signatures=())
        proposals[name] = dataclasses.replace(current, signatures=(*current.signatures, signature), line=None)
    return proposals
