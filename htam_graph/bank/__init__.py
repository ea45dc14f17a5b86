"""Memory-bank export and import: share what one graph learned with another (embedded FalkorDB or Neo4j).

Format (version 1), for `export_bank(store, "bank.jsonl")`:
- `bank.jsonl`: JSON Lines in the shape of APOC's `apoc.export.json.all`, all nodes first, then all
  relationships. A node is `{"type": "node", "id": "<Label>:<key>", "labels": [...], "properties": {...}}`; a
  relationship is `{"type": "relationship", "label": TYPE, "properties": {...}, "start": {"id", "labels",
  "properties": {"key"}}, "end": {...}}`. Identity is the application key, never an engine's internal id.
  Lines are sorted (label order, then key), so one graph always exports the same bytes up to `created_ms`.
- `bank.jsonl.manifest.json`: format version, graph schema version, counts per label and relationship type,
  line count, sha256 of the jsonl, producing tool and version, created_ms.
- A path ending in `.gz` (`bank.jsonl.gz`, manifest `bank.jsonl.gz.manifest.json`) is the same jsonl
  gzip-compressed (deterministic: no name or time in the gzip header). The manifest's sha256 and line count
  are of the uncompressed lines, so a bank has the same sha256 compressed or not.

Import validates the whole file against the manifest before writing anything (one `BankFormatError` line on
any problem), then MERGEs the static nodes on key (existing properties win), the seed's prior transitions
(counts untouched), and replays the attempts through `memory.record_attempts`, which applies stat increments
for attempts the graph did not hold. So import -> re-import is a no-op and two banks merge by adding their
counts and sums. Stat properties in the file (totals, STATS_ON, EVIDENCE_ON, evidence TRANSITION edges) are
derived data: they are exported for reading but rebuilt from the attempts on import.

CPU attempts (Triton interpreted) are not evidence (`memory.is_evidence`): a bank written by a version that
counted them imports with their contributions left out (its attempts are replayed under today's rule), and the
import also moves out whatever CPU contributions the receiving graph itself still holds
(`memory.repair_cpu_evidence`).
"""

from htam_graph.bank.export import export_bank
from htam_graph.bank.format import (
    FORMAT_VERSION,
    LABELS,
    REL_TYPES,
    ImportCounts,
    Manifest,
    manifest_path,
    read_bank_bytes,
)
from htam_graph.bank.merge import import_bank

__all__ = [
    "FORMAT_VERSION",
    "LABELS",
    "REL_TYPES",
    "ImportCounts",
    "Manifest",
    "export_bank",
    "import_bank",
    "manifest_path",
    "read_bank_bytes",
]
