"""Policies of policies (``and``, ``not``, ``drop``, ``composite``) and the table that builds any policy.

How combined policies compose their probability of a positive vote (sub-policies are treated as
independent):

* ``and``: the product of its members' probabilities;
* ``not``: one minus its member's;
* ``drop``: the product of its members' (the probability that all match, i.e. that it drops);
* ``composite``: P(some member samples) times the composite's observed accepted/matched ratio over the
  last 10 seconds (its rate allocation is a rate limit).

Like the Collector, ``and`` and ``drop`` stop evaluating at the first member that does not sample; the
members they skip are only *estimated* (:meth:`Policy.estimate`), so a skipped rate limit spends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

from tailcut.collector._confignode import Node
from tailcut.collector._policies import LEAF_POLICIES, Policy
from tailcut.collector._ratewindow import AcceptanceWindow
from tailcut.collector._votes import Decision, TraceView, Vote


class _Group(Policy):
    """A policy over member policies."""

    def __init__(self, name: str, members: Sequence[Policy]) -> None:
        super().__init__(name)
        self.members = list(members)

    def attribute_keys(self) -> frozenset[str]:
        return frozenset().union(*(member.attribute_keys() for member in self.members))

    def _all_sample(self, trace: TraceView, now: float) -> tuple[bool, float]:
        """(every member sampled, product of their probabilities), stopping votes at the first miss."""
        probability = 1.0
        all_sampled = True
        for member in self.members:
            if all_sampled:
                vote = member.evaluate(trace, now)
                probability *= vote.probability
                all_sampled = vote.decision is Decision.SAMPLED
            else:
                probability *= member.estimate(trace, now)
        return all_sampled, probability

    def estimate(self, trace: TraceView, now: float) -> float:
        return math.prod(member.estimate(trace, now) for member in self.members)


class _AllOf(_Group):
    """A group that votes ``on_match`` when every member samples (``and``, ``drop``)."""

    on_match: Decision
    description_prefix: str

    @classmethod
    def from_config(cls, name: str, block: Node) -> Self:
        (members_key,) = cls.config_keys
        keys = block.mapping(cls.config_keys, required=cls.config_keys)
        return cls(name, build_members(keys[members_key], NESTED_TYPES))

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        matched, probability = self._all_sample(trace, now)
        return Vote(self.on_match if matched else Decision.NOT_SAMPLED, probability)

    @property
    def description(self) -> str:
        return self.description_prefix + "; ".join(member.description for member in self.members)


class And(_AllOf):
    """Samples when every member samples."""

    type_name = "and"
    config_keys = ("and_sub_policy",)
    on_match = Decision.SAMPLED
    description_prefix = "all of: "


class Drop(_AllOf):
    """Drops the trace (a veto over every other policy) when every member samples."""

    type_name = "drop"
    config_keys = ("drop_sub_policy",)
    on_match = Decision.DROPPED
    description_prefix = "drop when all of: "


class Not(Policy):
    """Samples exactly when its one member does not."""

    type_name = "not"
    config_keys = ("not_sub_policy",)

    def __init__(self, name: str, member: Policy) -> None:
        super().__init__(name)
        self.member = member

    @classmethod
    def from_config(cls, name: str, block: Node) -> Not:
        keys = block.mapping(cls.config_keys, required=cls.config_keys)
        return cls(name, build_policy(keys["not_sub_policy"], NESTED_TYPES))

    def attribute_keys(self) -> frozenset[str]:
        return self.member.attribute_keys()

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        vote = self.member.evaluate(trace, now)
        flipped = Decision.NOT_SAMPLED if vote.decision is Decision.SAMPLED else Decision.SAMPLED
        return Vote(flipped, 1.0 - vote.probability)

    def estimate(self, trace: TraceView, now: float) -> float:
        return 1.0 - self.member.estimate(trace, now)

    @property
    def description(self) -> str:
        return f"not ({self.member.description})"


class Composite(_Group):
    """Members in ``policy_order``, each with a share of ``max_total_spans_per_second``.

    As in the Collector: the first member that samples decides; the trace is kept when that member's
    spans this second plus the trace's stay within its allocation (``rate_allocation`` percent of the
    total; a listed member with percent 0 gets an equal share, an unlisted member gets none) and within
    the total.
    """

    type_name = "composite"
    config_keys = ("max_total_spans_per_second", "policy_order", "composite_sub_policy", "rate_allocation")

    def __init__(
        self,
        name: str,
        members: Sequence[Policy],
        allocations: Sequence[float],
        max_total_spans_per_second: int,
    ) -> None:
        super().__init__(name, members)
        self.allocations = list(allocations)
        self.max_total = max_total_spans_per_second
        self._second = -1
        self._spent = [0] * len(self.members)
        self._window = AcceptanceWindow()

    @classmethod
    def from_config(cls, name: str, block: Node) -> Composite:
        keys = block.mapping(
            cls.config_keys, required=("max_total_spans_per_second", "policy_order", "composite_sub_policy")
        )
        total = keys["max_total_spans_per_second"].as_int(minimum=1)
        members = build_members(keys["composite_sub_policy"], NESTED_TYPES)
        by_name = {member.name: member for member in members}
        order_node = keys["policy_order"]
        order = order_node.as_str_list()
        for index, member_name in enumerate(order):
            if member_name not in by_name:
                Node(member_name, order_node.child_path(index)).fail(
                    "a composite_sub_policy name (" + ", ".join(by_name) + ")"
                )
        missing = [member for member in by_name if member not in order]
        if missing or len(set(order)) != len(order):
            order_node.error(
                "must name every composite_sub_policy exactly once; missing " + ", ".join(missing)
            )
        shares: dict[str, float] = {}
        allocation_node = keys.get("rate_allocation", Node(None, block.child_path("rate_allocation")))
        for item in allocation_node.items():
            entry = item.mapping(("policy", "percent"), required=("policy", "percent"))
            policy_name = entry["policy"].as_choice(by_name)
            percent = entry["percent"].as_int(minimum=0)
            shares[policy_name] = total * percent / 100 if percent > 0 else total / len(members)
        if sum(shares.values()) > total + 1e-9:
            allocation_node.error("percentages add up to more than 100")
        ordered = [by_name[member_name] for member_name in order]
        return cls(name, ordered, [shares.get(member.name, 0.0) for member in ordered], total)

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        second = int(now)
        if second != self._second:
            self._second = second
            self._spent = [0] * len(self.members)
        miss = 1.0
        decided: bool | None = None
        for index, member in enumerate(self.members):
            if decided is not None:
                miss *= 1.0 - member.estimate(trace, now)
                continue
            vote = member.evaluate(trace, now)
            miss *= 1.0 - vote.probability
            if vote.decision is Decision.SAMPLED:
                if_sampled = self._spent[index] + trace.span_count
                decided = if_sampled <= self.allocations[index] and if_sampled <= self.max_total
                if decided:
                    self._spent[index] = if_sampled
        if decided is None:
            return Vote(Decision.NOT_SAMPLED, (1.0 - miss) * self._window.ratio())
        ratio = self._window.record(second, decided)
        return Vote(Decision.SAMPLED if decided else Decision.NOT_SAMPLED, (1.0 - miss) * ratio)

    def estimate(self, trace: TraceView, now: float) -> float:
        miss = math.prod(1.0 - member.estimate(trace, now) for member in self.members)
        return (1.0 - miss) * self._window.ratio()

    @property
    def description(self) -> str:
        parts = [
            f"{member.name} ({allocation:g}/s)"
            for member, allocation in zip(self.members, self.allocations, strict=True)
        ]
        return f"first of {', '.join(parts)} within {self.max_total} spans/s"


#: Every policy type by its ``type`` name (the Collector's names).
POLICY_TYPES: dict[str, type[Policy]] = {
    cls.type_name: cls for cls in (*LEAF_POLICIES, And, Not, Drop, Composite)
}
#: Types allowed inside ``and``, ``not``, ``drop`` and ``composite`` (vetoes and budgets stay top-level).
NESTED_TYPES: tuple[str, ...] = tuple(name for name in POLICY_TYPES if name not in ("drop", "composite"))


def build_policy(node: Node, allowed_types: Sequence[str] = tuple(POLICY_TYPES)) -> Policy:
    """Build one policy from its config entry (``{name, type, <type>: {...}}``).

    Raises
    ------
    ConfigError
        Naming the key path of the first problem.
    """
    if not isinstance(node.value, dict):
        node.fail("a policy (a mapping with name and type)")
    if "type" not in node.value:
        Node(None, node.child_path("type")).error("required key is missing")
    type_name = Node(node.value["type"], node.child_path("type")).as_choice(allowed_types)
    keys = node.mapping(("name", "type", type_name), required=("name", "type"))
    name = keys["name"].as_str()
    block = keys.get(type_name, Node(None, node.child_path(type_name)))
    return POLICY_TYPES[type_name].from_config(name, block)


def build_members(node: Node, allowed_types: Sequence[str]) -> list[Policy]:
    """Build a non-empty list of uniquely named policies."""
    items = node.items()
    if not items:
        node.fail("a non-empty list of policies")
    policies: list[Policy] = []
    for item in items:
        policy = build_policy(item, allowed_types)
        if any(existing.name == policy.name for existing in policies):
            Node(policy.name, item.child_path("name")).fail("a name not used by another policy in this list")
        policies.append(policy)
    return policies
