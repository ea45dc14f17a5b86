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


class StepInfraError(BackendError):
    """One step's generation failed for a reason that is not the model's answer (the command exited non-zero,
    printed nothing or ran past its timeout; the model did not answer in time). The loop records the step as
    `infra_error`, which adds no evidence to the memory, and goes on."""


class AwaitingReply(HtamError):
    """The generator has no reply yet for this request (`--backend files`, a replay file without it, a batch
    job). The loop stops the run at that step so that the same command, once the reply is there, resumes it.
    `prompt` holds the rendered request (`system`, `memory`, `user`)."""

    def __init__(self, message: str, *, prompt: dict[str, str]) -> None:
        super().__init__(message)
        self.prompt = prompt
