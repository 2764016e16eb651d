"""The decider's anomaly watch: each move into a node is observed (see
:mod:`cairn.decider.anomaly`); a detection is answered as the workflow's ``anomaly``
block says — intervene first, then end the run failed or hand it to a person.

The intervention is declarative (a hint appended to the agent's messages, state fields
dropped or set) so that it stays a pure part of the decision: the node the run was moving
into then runs with it, and replaying the history intervenes in exactly the same place.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from cairn.decider.anomaly import Anomaly, cleared, note_tools, observe, watched
from cairn.decider.step import Step, Transition, outcome_node
from cairn.model.commands import ReportAnomaly
from cairn.model.definition import AnomalyPolicy
from cairn.model.events import NodeSucceeded
from cairn.model.statuses import RunStatus

# The anomalies a run keeps (with their scenes): the newest, should a hand-off loop
# detect many.
MAX_RECORDS = 20
INTERVENED, FAILED, HANDED_OFF = "intervened", "failed", "handed_off"


class Watch(Step):
    def note_tool_calls(self, event: NodeSucceeded) -> None:
        policy = self.definition.anomaly
        if policy is not None and event.messages:
            self.state.anomaly = note_tools(policy, self.state.anomaly, event.messages)

    def anomaly_diverted(self, node_id: str) -> bool:
        """Observe the move into ``node_id`` (already counted as a visit); True if an
        anomaly took the run elsewhere (failed, or handed off) instead of into the node."""
        policy = self.definition.anomaly
        if policy is None or not watched(self.definition, node_id):
            return False
        track, found = observe(
            policy, self.state.anomaly, self.state.vars, self.state.artifacts, node_id
        )
        self.state.anomaly = track
        if found is None:
            return False
        kind = found.kind.value
        made = track.interventions.get(kind, 0)
        if made < policy.interventions:
            self.state.anomaly = replace(
                cleared(track), interventions={**track.interventions, kind: made + 1}
            )
            self.intervene(policy, node_id, found)
            return False
        self.state.anomaly = cleared(track)
        if policy.handoff is not None:
            self.report(node_id, found, HANDED_OFF)
            self.enter(policy.handoff, node_id, f"anomaly_detected:{kind}")
        else:
            self.report(node_id, found, FAILED)
            self.transitions.append(
                Transition(node_id, f"anomaly_detected:{kind}", outcome_node(RunStatus.FAILED))
            )
            self.fail_run(f"anomaly:{kind}: {found.detail}")
        return True

    def intervene(self, policy: AnomalyPolicy, node_id: str, found: Anomaly) -> None:
        """Give the run a second chance: the node it moves into sees the hint, and the
        state it may have got stuck on is reset."""
        kind = found.kind.value
        if policy.hint is not None:
            text = policy.hint.replace("{kind}", kind).replace("{detail}", found.detail)
            self.state.messages.append(
                {"role": "system", "content": text, "cairn": "anomaly", "kind": kind}
            )
        for name in policy.drop:
            self.state.vars.pop(name, None)
        self.state.vars.update(copy.deepcopy(dict(policy.assign)))
        self.report(node_id, found, INTERVENED)
        self.transitions.append(Transition(node_id, f"anomaly_intervened:{kind}", node_id))

    def report(self, node_id: str, found: Anomaly, action: str) -> None:
        record = {
            "kind": found.kind.value,
            "action": action,
            "node": node_id,
            "iteration": self.state.visits.get(node_id, 0),
            "at": self.at,
            "detail": found.detail,
            "scene": found.scene,
        }
        self.state.anomalies = [*self.state.anomalies, record][-MAX_RECORDS:]
        self.commands.append(ReportAnomaly(found.kind.value, action, node_id, found.detail))


__all__ = ["FAILED", "HANDED_OFF", "INTERVENED", "Watch"]
