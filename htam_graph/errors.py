"""One exception tree. Adapters wrap library errors (`raise StoreError(...) from e`); the CLI maps every
`HtamError` to one line on stderr and exit code 1.

A failed *candidate kernel* is data (`EvalResult.error_kind`), never an exception.
"""


class HtamError(Exception):
    """Base of every error htam-graph raises on purpose."""


class ConfigError(HtamError):
    """Bad settings, flags, environment or config file."""


class StoreError(HtamError):
    """The graph store failed (query error, schema, bad data)."""


class StoreUnavailable(StoreError):
    """The graph store cannot be reached (refused connection, bad URI, bad credentials, server down)."""


class EmbeddedServerError(StoreUnavailable):
    """The embedded FalkorDB server could not be started, found or stopped."""


class QueryError(StoreError):
    """A named query is unknown, malformed, or called with the wrong parameters."""


class SeedError(HtamError):
    """The seed memory file is malformed."""


class UnknownKeyError(HtamError):
    """A key (direction, strategy, task) that the memory does not hold."""


class BankFormatError(HtamError):
    """A memory-bank export is corrupt, incomplete or of a newer format."""


class TaskError(HtamError):
    """A task file or task key is invalid or unknown."""


class RuntimeEvalError(HtamError):
    """The evaluation infrastructure itself failed (not the candidate)."""


class BackendError(HtamError):
    """An LLM or generator backend failed (missing key, bad reply after retries, transport error)."""


class BudgetExceeded(BackendError):
    """The run's dollar budget is spent."""
