"""The evaluation records how long it waited for the GPU (`queued_s`, in total and per kind), forwarding every
event unchanged."""

from __future__ import annotations

import time

from htam_graph.kernels_runtime.worker import harness


class _Rec:
    def __init__(self) -> None:
        self.infos: dict[str, str] = {}

    def info(self, name: str, text: str) -> None:
        self.infos[name] = text


def test_waits_are_summed_and_events_forwarded() -> None:
    seen: list[str] = []
    rec = _Rec()
    waits = harness._Waits(seen.append, rec)  # type: ignore[arg-type]
    for pause, kind in ((0.05, "memory"), (0.02, "timing"), (0.03, "timing")):
        waits("queued", kind)
        time.sleep(pause)
        waits("admitted", kind)
    assert seen == ["queued", "admitted"] * 3  # the evaluator's protocol: the event alone
    total, _, count, _, *kinds = rec.infos["queued_s"].replace(",", "").split()
    assert 0.10 <= float(total) < 1.0 and count == "3"
    by_kind = dict(zip(kinds[::2], map(float, kinds[1::2]), strict=True))
    assert by_kind.keys() == {"memory", "timing"}
    assert 0.05 <= by_kind["memory"] < 0.5 and 0.05 <= by_kind["timing"] < 0.5
    assert abs(sum(by_kind.values()) - float(total)) < 0.01


def test_an_admission_without_a_wait_records_nothing() -> None:
    seen: list[str] = []
    rec = _Rec()
    waits = harness._Waits(seen.append, rec)  # type: ignore[arg-type]
    waits("admitted", "shared")
    assert seen == ["admitted"] and rec.infos == {}
