"""The evaluation records how long it waited for the GPU (`queued_s`), forwarding every event unchanged."""

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
    for pause in (0.05, 0.02):
        waits("queued")
        time.sleep(pause)
        waits("admitted")
    assert seen == ["queued", "admitted", "queued", "admitted"]
    total, _, count, _ = rec.infos["queued_s"].split()
    assert 0.07 <= float(total) < 1.0 and count == "2"


def test_an_admission_without_a_wait_records_nothing() -> None:
    seen: list[str] = []
    rec = _Rec()
    waits = harness._Waits(seen.append, rec)  # type: ignore[arg-type]
    waits("admitted")
    assert seen == ["admitted"] and rec.infos == {}
