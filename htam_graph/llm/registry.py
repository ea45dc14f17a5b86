"""Build a `Generator` from a backend spec: `anthropic[:MODEL]`, `openai:MODEL`, `llm:MODEL`, `command:CMD`,
`files`, `batch:anthropic[:MODEL]`, `batch:openai:MODEL`, `replay:FILE`.

Every backend is a factory in one registry, the one way a generator is built from a `--backend` spec: the
offline `rules` generator (`htam_graph.rules`, which this package does not import) is registered in it by the
composition module `htam_graph.generators`, and tests register the scripted fake through the same path.
`files` and `batch:*` never answer at once: their requests are awaited (`AwaitingReply`); for `batch:*` the
CLI sends every awaited request of a bench as one batch job (`batch.py`).

Keys come from the `env` mapping passed in (the CLI passes `os.environ`): `ANTHROPIC_API_KEY`,
`OPENAI_API_KEY` (or the variable named by `api_key_env`, e.g. `DEEPSEEK_API_KEY`; any non-empty value
works for a local vLLM). Base URLs: the `base_url` argument, else `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`,
else the provider's (for `openai:deepseek-*` DeepSeek's).

Prices: the `price` argument, else the table in `pricing.py`. A model without a known price runs with cost
0 and `cost_known=False`, but not under a dollar budget (that budget could not be enforced).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from htam_graph.errors import BackendError
from htam_graph.llm.anthropic_backend import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_ANTHROPIC_MODEL,
    AnthropicChatClient,
)
from htam_graph.llm.budget import BudgetTracker
from htam_graph.llm.command_backend import CommandChatClient, CommandGenerator, parse_command
from htam_graph.llm.deferred import FilesGenerator
from htam_graph.llm.generator import LLMGenerator
from htam_graph.llm.llmlib_backend import LlmLibraryClient
from htam_graph.llm.openai_backend import OpenAIChatClient, default_base_url
from htam_graph.llm.pricing import Price, lookup_price
from htam_graph.llm.replay import RecordingGenerator, ReplayGenerator
from htam_graph.llm.retry import RetryPolicy
from htam_graph.llm.sdk_chat import SdkChatClient
from htam_graph.model import PrecisionPolicy
from htam_graph.ports import Generator


@dataclass(frozen=True)
class BackendOptions:
    """Everything a backend factory may use. `argument` is the part of the spec after the first colon."""

    backend: str
    argument: str | None
    env: Mapping[str, str]
    budget: BudgetTracker
    retry: RetryPolicy
    base_url: str | None = None
    api_key_env: str | None = None
    price: Price | None = None
    max_tokens: int = 16384
    timeout_s: float = 600.0
    temperature: float | None = None
    templates_dir: Path | None = None
    command_json: bool = False  # command: send the request as JSON instead of text
    # rules: which recipes are executable (the precision track's only under a non-strict policy)
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    # rules: the launch-configuration cache (None: remembered in this process only)
    autotune_dir: Path | None = None
    device_name: str = ""  # rules: the GPU the autotune cache is keyed by ("" on the CPU)


BackendFactory = Callable[[BackendOptions], Generator]
_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Make `name` (the spec before the colon) build generators with `factory`."""
    if name in _REGISTRY and not replace:
        raise ValueError(f"backend {name!r} is already registered")
    _REGISTRY[name] = factory


def unregister_backend(name: str) -> None:
    """Remove a backend (tests remove the scripted fake they registered)."""
    _REGISTRY.pop(name, None)


def known_backends() -> list[str]:
    """The registered backend names, sorted."""
    return sorted(_REGISTRY)


def make_generator(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    budget: BudgetTracker | None = None,
    retry: RetryPolicy | None = None,
    api_key_env: str | None = None,
    price: Price | None = None,
    max_tokens: int = 16384,
    timeout_s: float = 600.0,
    temperature: float | None = None,
    templates_dir: Path | None = None,
    record_path: Path | None = None,
    command_json: bool = False,
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
    autotune_dir: Path | None = None,
    device_name: str = "",
) -> Generator:
    """Build the generator named by `spec`; with `record_path`, every reply is also appended there.

    Raises `BackendError` (one line) for an unknown backend, a missing key or an unpriced model under a
    budget.
    """
    name, _, argument = spec.strip().partition(":")
    factory = _REGISTRY.get(name)
    if factory is None:
        raise BackendError(f"unknown LLM backend {name!r}: choose one of {', '.join(known_backends())}")
    options = BackendOptions(
        backend=name,
        argument=argument.strip() or None,
        env=os.environ if env is None else env,
        budget=budget or BudgetTracker(),
        retry=retry or RetryPolicy(),
        base_url=base_url,
        api_key_env=api_key_env,
        price=price,
        max_tokens=max_tokens,
        timeout_s=timeout_s,
        temperature=temperature,
        templates_dir=templates_dir,
        command_json=command_json,
        precision_policy=precision_policy,
        autotune_dir=autotune_dir,
        device_name=device_name,
    )
    generator = factory(options)
    return RecordingGenerator(generator, record_path) if record_path is not None else generator


def _api_key(options: BackendOptions, default_var: str, hint: str) -> str:
    var = options.api_key_env or default_var
    key = options.env.get(var, "").strip()
    if not key:
        raise BackendError(f"{var} is not set: export it {hint}")
    return key


def _price_for(model: str, options: BackendOptions) -> Price | None:
    price = options.price or lookup_price(model)
    if price is None and options.budget.limit_usd is not None:
        raise BackendError(
            f"no price known for model {model!r}, so a dollar budget cannot be enforced: "
            "pass --price IN,OUT (USD per million tokens) or run without --budget-usd"
        )
    return price


def _anthropic(options: BackendOptions) -> Generator:
    model = options.argument or DEFAULT_ANTHROPIC_MODEL
    return _sdk_generator(
        AnthropicChatClient,
        model,
        options,
        key_hint=("ANTHROPIC_API_KEY", "or use --backend rules"),
        url_var="ANTHROPIC_BASE_URL",
        default_url=DEFAULT_ANTHROPIC_BASE_URL,
    )


def _openai(options: BackendOptions) -> Generator:
    model = options.argument
    if not model:
        raise BackendError("the openai backend needs a model: openai:MODEL (e.g. openai:deepseek-reasoner)")
    return _sdk_generator(
        OpenAIChatClient,
        model,
        options,
        key_hint=("OPENAI_API_KEY", "(any value for a local server) or use --backend rules"),
        url_var="OPENAI_BASE_URL",
        default_url=default_base_url(model),
    )


def _sdk_generator(
    client_class: type[SdkChatClient],
    model: str,
    options: BackendOptions,
    *,
    key_hint: tuple[str, str],
    url_var: str,
    default_url: str,
) -> Generator:
    """An `LLMGenerator` over an official-SDK client: the key from `key_hint`'s variable (its hint when
    unset), the base URL from the option, then `url_var`, then `default_url`."""
    client = client_class(
        model=model,
        api_key=_api_key(options, *key_hint),
        base_url=options.base_url or options.env.get(url_var) or default_url,
        max_tokens=options.max_tokens,
        timeout_s=options.timeout_s,
        temperature=options.temperature,
        price=_price_for(model, options),
    )
    return LLMGenerator(
        client, budget=options.budget, retry=options.retry, templates_dir=options.templates_dir
    )


def _replay(options: BackendOptions) -> Generator:
    if not options.argument:
        raise BackendError("the replay backend needs a file: replay:PATH.jsonl")
    path = Path(options.argument).expanduser()
    if not path.is_file():
        raise BackendError(f"replay file {path} does not exist")
    return ReplayGenerator(path, templates_dir=options.templates_dir)


def _llm(options: BackendOptions) -> Generator:
    if not options.argument:
        raise BackendError(
            "the llm backend needs a model: llm:MODEL (a model id or alias `llm models` lists)"
        )
    client = LlmLibraryClient(
        options.argument,
        timeout_s=options.timeout_s,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
    )
    client.price = _price_for(client.model, options)
    return LLMGenerator(
        client, budget=options.budget, retry=options.retry, templates_dir=options.templates_dir
    )


def _command(options: BackendOptions) -> Generator:
    argv = parse_command(options.argument)
    if options.budget.limit_usd is not None:
        raise BackendError(
            "a command's cost is unknown, so a dollar budget cannot be enforced: run without --budget-usd"
        )
    client = CommandChatClient(
        argv,
        timeout_s=options.timeout_s,
        as_json=options.command_json,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        env=options.env,
    )
    return CommandGenerator(
        client, budget=options.budget, retry=options.retry, templates_dir=options.templates_dir
    )


def _files(options: BackendOptions) -> Generator:
    if options.argument:
        raise BackendError(f"the files backend takes no argument (got files:{options.argument})")
    return FilesGenerator(templates_dir=options.templates_dir)


def _batch(options: BackendOptions) -> Generator:
    provider, _, model = (options.argument or "").partition(":")
    if provider == "anthropic":
        _api_key(options, "ANTHROPIC_API_KEY", "or use --backend files")
        model = model or DEFAULT_ANTHROPIC_MODEL
    elif provider == "openai":
        _api_key(options, "OPENAI_API_KEY", "or use --backend files")
        if not model:
            raise BackendError("the openai batch backend needs a model: batch:openai:MODEL")
    else:
        raise BackendError("the batch backend is batch:anthropic[:MODEL] or batch:openai:MODEL")
    _price_for(model, options)
    return FilesGenerator(name=f"batch:{provider}:{model}", templates_dir=options.templates_dir)


register_backend("anthropic", _anthropic)
register_backend("openai", _openai)
register_backend("replay", _replay)
register_backend("llm", _llm)
register_backend("command", _command)
register_backend("files", _files)
register_backend("batch", _batch)
