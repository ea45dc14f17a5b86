"""LLM backends: Anthropic, OpenAI-compatible servers, the `llm` library, any command, replies saved to files
or sent as batch jobs, replay files, and a scripted fake for tests.

Importing this package imports no SDK and reads no environment; `make_generator` builds a backend.
"""

from htam_graph.llm.budget import BudgetTracker, RunTotals
from htam_graph.llm.extract import ExtractResult, extract_code
from htam_graph.llm.generator import ChatClient, Completion, LLMGenerator, reply_from_text
from htam_graph.llm.pricing import Price, lookup_price
from htam_graph.llm.prompts import RenderedPrompt, load_templates, render_prompt
from htam_graph.llm.registry import BackendOptions, known_backends, make_generator, register_backend
from htam_graph.llm.replay import RecordingGenerator, ReplayGenerator
from htam_graph.llm.retry import RetryPolicy, TransientBackendError

__all__ = [
    "BackendOptions",
    "BudgetTracker",
    "ChatClient",
    "Completion",
    "ExtractResult",
    "LLMGenerator",
    "Price",
    "RecordingGenerator",
    "RenderedPrompt",
    "ReplayGenerator",
    "RetryPolicy",
    "RunTotals",
    "TransientBackendError",
    "extract_code",
    "known_backends",
    "load_templates",
    "lookup_price",
    "make_generator",
    "register_backend",
    "render_prompt",
    "reply_from_text",
]
