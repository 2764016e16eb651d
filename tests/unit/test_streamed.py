"""What ``cairn watch`` shows of a run's streaming model calls: the chunk log assembled
into each node's current call (cairn.observe.streamed)."""

from __future__ import annotations

from typing import Any

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import CHUNKS_PER_READ
from cairn.observe.streamed import TEXT_KEPT, Streamed, tail


def chunks(
    *texts: str,
    node: str = "talk",
    attempt: int = 1,
    call: int = 0,
    at: int = 0,
    done: bool = False,
) -> list[dict[str, Any]]:
    """One call's chunks, as its publisher writes them: offsets running on from ``at``."""
    made = []
    for text in texts:
        made.append({"node": node, "iteration": 1, "attempt": attempt, "call": call})
        made[-1].update(offset=at, text=text)
        at += len(text)
    if done:
        made.append({"node": node, "iteration": 1, "attempt": attempt, "call": call})
        made[-1].update(offset=at, text="", done=True)
    return made


def logged(*batches: list[dict[str, Any]]) -> Streamed:
    """A Streamed fed each batch in turn, ids as a Redis stream's."""
    said, n = Streamed(), 0
    for batch in batches:
        ids = [f"{n + i + 1}-0" for i in range(len(batch))]
        n += len(batch)
        said.add(zip(ids, batch, strict=True))
    return said


def text(said: Streamed, node: str = "talk", attempt: int = 1) -> str:
    return "\n".join(said.shown(node, 1, attempt, rows=10, width=200))


def test_a_call_is_assembled_in_order_and_read_on_from_the_last_id() -> None:
    said = logged(chunks("The answer ", "is"), chunks(" 42.", at=len("The answer is")))
    assert text(said) == "The answer is 42."
    assert said.after == "3-0"
    assert said.shown("other", 1, 1, rows=4, width=80) == []


def test_an_older_attempts_text_is_superseded_and_its_late_chunks_dropped() -> None:
    said = logged(
        chunks("cut sh"),
        chunks("whole ", attempt=2),
        chunks("ort", at=len("cut sh")),  # the first attempt's, arriving late
        chunks("this time", attempt=2, at=len("whole ")),
    )
    assert text(said, attempt=2) == "whole this time"
    # The run's state says attempt 2 runs, and nothing of it was logged yet: no stale text.
    cut = logged(chunks("cut short"))
    assert text(cut, attempt=1) == "cut short"
    assert text(cut, attempt=2) == ""


def test_a_new_call_starts_afresh_and_a_done_call_stays_until_then() -> None:
    said = logged(chunks("first answer", done=True))
    assert text(said) == "first answer"  # done, and the node has not called again yet
    assert said.calls["talk", 1].done
    said.add([("9-0", chunks("second")[0] | {"call": 1})])
    assert text(said) == "second"
    said.add([("10-0", chunks("late")[0])])  # the first call's: it is over
    assert text(said) == "second"


def test_a_call_said_again_from_an_offset_replaces_what_followed() -> None:
    """A recovered execution makes the same call again (same attempt, same index)."""
    said = logged(chunks("abc", "def"), chunks("xyz", at=0))
    assert text(said) == "xyz"
    said = logged(chunks("abc", "def"), chunks("DEF", at=3))
    assert text(said) == "abcDEF"


def test_missed_chunks_leave_only_what_follows_the_gap() -> None:
    said = logged(chunks("abc"), chunks("tail end", at=50))
    assert text(said) == "tail end"
    assert said.calls["talk", 1].end == 58


def test_only_the_last_characters_of_a_long_answer_are_held() -> None:
    long = [f"word{n} " for n in range(2000)]
    said = logged(chunks(*long))
    held = said.calls["talk", 1]
    assert len(held.text) == TEXT_KEPT and held.text == "".join(long)[-TEXT_KEPT:]
    assert held.end == len("".join(long))
    said.add([("x-0", chunks("!", at=held.end)[0])])
    assert held.text.endswith("word1999 !")


def test_older_iterations_are_forgotten() -> None:
    said = logged(chunks("first visit"))
    said.add([("9-0", {**chunks("second visit")[0], "iteration": 2})])
    said.prune({"talk": 2, "elsewhere": 7})
    assert set(said.calls) == {("talk", 2)}


def test_the_tail_is_the_last_rows_wrapped_at_the_width() -> None:
    assert tail("one\n\ntwo\nthree four five six\n", 3, 10) == ["two", "three four", "five six"]
    assert tail("a b c d e f", 2, 3) == ["c d", "e f"]
    assert tail("", 4, 80) == [] and tail("text", 0, 80) == []


def test_a_read_goes_on_past_a_full_batch_only() -> None:
    """A watch joining a run that has said much catches up in one refresh; otherwise
    one read per refresh."""
    leases = MemoryLeases()
    reads: list[str] = []
    read_chunks = leases.read_chunks

    def counting(run_id: str, after: str, block_s: float = 0.0) -> list[Any]:
        reads.append(after)
        return read_chunks(run_id, after, block_s)

    leases.read_chunks = counting  # type: ignore[method-assign]
    words = [f"w{n} " for n in range(CHUNKS_PER_READ + 10)]
    leases.append_chunks("r1", chunks(*words))
    said = Streamed()
    said.read(leases, "r1")
    assert len(reads) == 2 and text(said).endswith("w1009")
    said.read(leases, "r1")
    assert len(reads) == 3  # nothing new: one read
    said.read(MemoryLeases(), "no-such-run")  # no chunk log at all
